#!/usr/bin/env bash
# Checks meshd's outcome mapping against a real llama.cpp llama-server
# (PROFILE §12), from the repository root; `make test` does not run it:
#
#   1. builds llama-server from a llama.cpp source checkout with cmake (only
#      the llama-server target; CPU, native, no curl), unless LLAMA_SERVER
#      names a built binary
#   2. synthesises a small GGUF with `meshctl model synth`
#   3. runs meshd in front of it (a kind = "llama-server" backend)
#   4. sends the same chat twice through meshd's /v1/chat/completions and
#      checks that the second receipt's cache_hit_tokens is > 0 and equals
#      the timings.cache_n llama-server itself reports for that repeated
#      prompt (asked directly, with the prompt meshd rendered through the
#      engine's /apply-template), and that the first receipt claims none
#   5. with a draft model (a second file of the target's own weights, so
#      that drafts are accepted), that the receipts carry llama-server's
#      draft counters: spec_proposed > 0, 0 < spec_accepted <=
#      spec_proposed, and tokens_accepted = spec_accepted (skipped with
#      CHECK_DRAFT=0)
#
# Usage: scripts/check-llama-server.sh LLAMA_CPP_SOURCE [BUILD_DIR]
#
# The source of mainline llama.cpp ships inside the node-llama-cpp npm
# package as a git bundle:
#   npm pack node-llama-cpp && tar xzf node-llama-cpp-*.tgz
#   git clone package/llama/gitRelease.bundle llama.cpp
# cmake and a C++ compiler come from Debian: apt-get install cmake g++.
# A cold build of llama-server takes 15 minutes or more on two cores.
# The build is native (-DGGML_NATIVE=ON); on a CPU with AMX where the
# kernel or a sandbox does not grant the AMX tile state, such a build dies
# with SIGILL loading the model: configure without AMX instead, e.g.
#   CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#     -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
# (later -D options override the script's).
#
# Environment: LLAMA_SERVER (a built llama-server: skips the build), JOBS
# (cmake -j, default 2), CMAKE_ARGS (added to the configure step), GO,
# CHECK_DRAFT (default 1), KEEP=1 keeps the scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
JOBS=${JOBS:-2}
CHECK_DRAFT=${CHECK_DRAFT:-1}
fail=0
ok()  { printf 'check-llama-server: ok    %s\n' "$*"; }
bad() { printf 'check-llama-server: FAIL  %s\n' "$*" >&2; fail=1; }
say() { printf 'check-llama-server: %s\n' "$*"; }

for tool in python3 curl; do
	command -v "$tool" >/dev/null 2>&1 || { echo "check-llama-server: $tool not found (Debian: apt-get install $tool)" >&2; exit 1; }
done

server=${LLAMA_SERVER:-}
if [ -z "$server" ]; then
	if [ $# -lt 1 ]; then
		sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
		exit 2
	fi
	src=$1
	build=${2:-$src/build-meshd-check}
	if [ ! -f "$src/CMakeLists.txt" ] || [ ! -d "$src/tools/server" ] && [ ! -d "$src/examples/server" ]; then
		echo "check-llama-server: $src is not a llama.cpp source checkout (no CMakeLists.txt and tools/server)" >&2
		exit 2
	fi
	if ! command -v cmake >/dev/null 2>&1; then
		echo "check-llama-server: cmake not found (Debian: apt-get install cmake g++)" >&2
		exit 1
	fi
	say "building llama-server from $src in $build (-j$JOBS)"
	# shellcheck disable=SC2086 # CMAKE_ARGS is a list of arguments
	cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF ${CMAKE_ARGS:-} >"$build.configure.log" 2>&1 ||
		{ tail -20 "$build.configure.log" >&2; exit 1; }
	cmake --build "$build" --target llama-server -j"$JOBS" >"$build.build.log" 2>&1 ||
		{ tail -20 "$build.build.log" >&2; exit 1; }
	server=$build/bin/llama-server
fi
[ -x "$server" ] || { echo "check-llama-server: $server is not an executable" >&2; exit 1; }
say "llama-server: $server ($("$server" --version 2>&1 | grep -m1 -i version || echo 'version unknown'))"

work=$(mktemp -d "${TMPDIR:-/tmp}/meshd-llama-server.XXXXXX")
meshd_pid=
cleanup() {
	if [ -n "$meshd_pid" ]; then
		kill "$meshd_pid" 2>/dev/null || true
		wait "$meshd_pid" 2>/dev/null || true
	fi
	if [ "${KEEP:-0}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

"$GO" build -o "$work/meshd" ./cmd/meshd
"$GO" build -o "$work/meshctl" ./cmd/meshctl
synth() { "$work/meshctl" model synth -o "$1" -type q8_0 -layers "$2" -dim 256 -heads 4 -kv-heads 2 -ff 512 -vocab 320 -ctx 1024 -seed 5 -separate-output; }
synth "$work/m.gguf" 2 >/dev/null
synth "$work/draft.gguf" 2 >/dev/null

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
backend() {
	printf '[[backend]]\nname = "%s"\nkind = "llama-server"\nrunner = "%s"\nmodel = "%s"\nfidelity = 1\nuj_per_token = 100\nthreads = 2\ncontext = 1024\ntemperature = 0\nseed = 1\nextra_args = ["--chat-template", "chatml"]\n' "$1" "$server" "$work/m.gguf"
	[ -z "${2:-}" ] || printf 'draft_model = "%s"\n' "$2"
}
{
	printf '[steward]\nstate_dir = "%s"\n\n[listen]\ntcp = ["127.0.0.1:%s"]\n\n[auth]\nanonymous = ["serve", "read"]\n\n' "$work/state" "$port"
	backend plain
	[ "$CHECK_DRAFT" = 0 ] || backend spec "$work/draft.gguf"
} >"$work/meshd.toml"
"$work/meshd" serve -config "$work/meshd.toml" >"$work/meshd.log" 2>&1 &
meshd_pid=$!
base=http://127.0.0.1:$port
for _ in $(seq 600); do
	curl -fsS "$base/readyz" >/dev/null 2>&1 && break
	kill -0 "$meshd_pid" 2>/dev/null || { tail -20 "$work/meshd.log" >&2; echo "check-llama-server: meshd exited" >&2; exit 1; }
	sleep 0.2
done
curl -fsS "$base/readyz" >/dev/null || { tail -20 "$work/meshd.log" >&2; echo "check-llama-server: meshd not ready" >&2; exit 1; }

# field FILE PATH... prints the JSON value at PATH (keys and indexes).
field() {
	python3 - "$@" <<-'EOF'
		import json, sys
		v = json.load(open(sys.argv[1]))
		for k in sys.argv[2:]:
		    v = v[int(k)] if isinstance(v, list) else v.get(k)
		    if v is None:
		        break
		print("" if v is None else v)
	EOF
}

msgs='[{"role":"system","content":"You are a helpful assistant who answers briefly and precisely."},{"role":"user","content":"What is the capital of France, and what river runs through it?"}]'
chat() { # chat BACKEND OUT
	curl -fsS "$base/v1/chat/completions" -H 'Content-Type: application/json' \
		-d "{\"model\":\"$1\",\"max_tokens\":16,\"messages\":$msgs}" -o "$2" ||
		{ tail -20 "$work/meshd.log" >&2; return 1; }
}

# The port of a backend's llama-server child (spec: the one given -md),
# from its command line.
child_port() {
	local pid args
	for pid in $(pgrep -P "$meshd_pid" || true); do
		args=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || continue
		grep -qx -- "$work/m.gguf" <<<"$args" || continue
		if grep -qx -- -md <<<"$args"; then kind=spec; else kind=plain; fi
		if [ "$kind" = "$1" ]; then
			grep -A1 -x -- --port <<<"$args" | tail -1
			return
		fi
	done
}

chat plain "$work/c1.json"
chat plain "$work/c2.json"
hit1=$(field "$work/c1.json" receipt receipt cache_hit_tokens)
hit2=$(field "$work/c2.json" receipt receipt cache_hit_tokens)
in2=$(field "$work/c2.json" receipt receipt tokens_in)
out1=$(field "$work/c1.json" choices 0 message content)
out2=$(field "$work/c2.json" choices 0 message content)
say "receipts: cache_hit_tokens $hit1 then $hit2 of $in2 prompt tokens"

cport=$(child_port plain)
if [ -z "$cport" ]; then
	bad "could not find the plain backend's llama-server child"
else
	cb=http://127.0.0.1:$cport
	python3 -c 'import json,sys; print(json.dumps({"messages": json.loads(sys.argv[1])}))' "$msgs" >"$work/tpl.req"
	curl -fsS "$cb/apply-template" -H 'Content-Type: application/json' -d @"$work/tpl.req" -o "$work/tpl.json"
	python3 - "$work/tpl.json" >"$work/direct.req" <<-'EOF'
		import json, sys
		p = json.load(open(sys.argv[1]))["prompt"]
		print(json.dumps({"prompt": p, "n_predict": 16, "cache_prompt": True, "temperature": 0, "seed": 1, "return_tokens": True}))
	EOF
	curl -fsS "$cb/completion" -H 'Content-Type: application/json' -d @"$work/direct.req" -o "$work/direct.json"
	cache_n=$(field "$work/direct.json" timings cache_n)
	eval_n=$(field "$work/direct.json" tokens_evaluated)
	say "llama-server on the same prompt repeated: timings.cache_n $cache_n of tokens_evaluated $eval_n"
	[ "$hit1" = 0 ] && ok "the first serve claims no cache hits" || bad "first serve: cache_hit_tokens $hit1, want 0"
	if [ -n "$hit2" ] && [ "$hit2" -gt 0 ] && [ "$hit2" = "$cache_n" ] && [ "$in2" = "$eval_n" ]; then
		ok "the repeated chat's receipt: cache_hit_tokens $hit2 = llama-server's cache_n (tokens_in $in2)"
	else
		bad "repeated chat: cache_hit_tokens '$hit2' (tokens_in $in2), llama-server's cache_n '$cache_n' (tokens_evaluated $eval_n)"
	fi
	[ "$out1" = "$out2" ] && ok "the cached serve answered as the cold one" || bad "answers differ: '$out1' then '$out2'"
fi

if [ "$CHECK_DRAFT" != 0 ]; then
	if chat spec "$work/s1.json" && chat spec "$work/s2.json"; then
		for f in s1 s2; do
			prop=$(field "$work/$f.json" receipt receipt spec_proposed)
			acc=$(field "$work/$f.json" receipt receipt spec_accepted)
			tacc=$(field "$work/$f.json" receipt receipt tokens_accepted)
			tout=$(field "$work/$f.json" receipt receipt tokens_out)
			hit=$(field "$work/$f.json" receipt receipt cache_hit_tokens)
			say "speculative serve $f: spec_proposed $prop spec_accepted $acc tokens_accepted $tacc tokens_out $tout cache_hit_tokens $hit"
			if [ "$prop" -gt 0 ] && [ "$acc" -gt 0 ] && [ "$acc" -le "$prop" ] && [ "$tacc" = "$acc" ] && [ "$tacc" -le "$tout" ]; then
				ok "speculative serve $f carries llama-server's draft counters"
			else
				bad "speculative serve $f: spec_proposed $prop spec_accepted $acc tokens_accepted $tacc tokens_out $tout"
			fi
		done
		hit=$(field "$work/s2.json" receipt receipt cache_hit_tokens)
		[ "$hit" -gt 0 ] && ok "the repeated speculative chat's receipt carries cache hits ($hit)" || bad "repeated speculative chat: cache_hit_tokens $hit"
	else
		bad "the speculative backend did not serve (meshd log: $work/meshd.log)"
	fi
fi

[ "$fail" = 0 ] && say "all checks passed" || say "some checks failed"
exit "$fail"
