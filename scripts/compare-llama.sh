#!/usr/bin/env bash
# compare-llama.sh: mesh-gguf against mainline llama.cpp's and
# ik_llama.cpp's llama-server on the same synthesised GGUF files.
#
# Usage:
#   scripts/compare-llama.sh --mainline SRC --ik SRC [flags]
#
#   --mainline SRC     a llama.cpp source checkout (node-llama-cpp ships one
#                      in its npm package, under llama/llama.cpp)
#   --ik SRC           an ik_llama.cpp source checkout
#   --mainline-bin B   use this llama-server instead of building SRC
#   --ik-bin B         likewise for ik_llama.cpp ("none" for either: leave
#                      that server out; its ratios print as -)
#   --mainline-cmake "ARGS", --ik-cmake "ARGS"
#                      cmake options added to that build's, e.g. to turn a
#                      path off: mainline built with GGML_NATIVE=ON on a
#                      Xeon with AMX segfaulted loading a Q8_0 model, so
#                      there it was built with --mainline-cmake
#                      "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON
#                      -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
#                      -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
#                      -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
#                      -DGGML_AVX_VNNI=ON" (every path but AMX)
#   --avx2             build both with AVX2 only (-DGGML_NATIVE=OFF
#                      -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#                      -DGGML_AVX512=OFF) and force mesh-gguf down with
#                      GODEBUG=cpu.avx512f=off,...
#   --types "T ..."    weight types (default: f32 f16 q8_0 q4_0 q4_1 q5_0
#                      q5_1 q4_k q5_k q6_k q4_k_m)
#   --threads "N ..."  thread counts (default: 1 2)
#   --rounds N         interleaved rounds per type and thread count (5)
#   --work DIR         builds, models and logs (default: /tmp/compare-llama)
#   --jobs N           parallel compile jobs (default: 2)
#   --shape L,D,H,KV,FF,V  layers, dim, heads, kv heads, ff, vocab of the
#                      synthesised models (default 8,2048,32,4,5632,32000;
#                      the vocabulary must exceed 31500)
#
# It never downloads anything: both servers are built from the checkouts
# given (cmake, Release, llama-server target only, no curl), the models
# are synthesised with meshctl model synth (dim 2048, 8 layers, 32/4
# heads, ff 5632, vocab 32000), and every server runs on 127.0.0.1.
#
# Each round sends every server, in turn, the same 128-token prompt (as
# token ids, so all three evaluate the same tokens; cache_prompt off)
# with 32 tokens to decode (ignore_eos, temperature 0), and every server
# is timed from its own response's timings by one formula: prompt t/s =
# 1000·prompt_n/prompt_ms, decode t/s = 1000·predicted_n/predicted_ms.
# The table gives, per type, the medians over rounds of mesh-gguf's
# speed divided by mainline's / by ik_llama.cpp's, then the absolute
# medians. It is not run by make test.
set -euo pipefail

mainline_src= ik_src= mainline_bin= ik_bin= avx2=0 mainline_cmake= ik_cmake=
types="f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m"
threads="1 2" rounds=5 work=/tmp/compare-llama jobs=2 shape=8,2048,32,4,5632,32000
while [ $# -gt 0 ]; do
	case "$1" in
	--mainline) mainline_src=$2; shift 2 ;;
	--ik) ik_src=$2; shift 2 ;;
	--mainline-bin) mainline_bin=$2; shift 2 ;;
	--ik-bin) ik_bin=$2; shift 2 ;;
	--mainline-cmake) mainline_cmake=$2; shift 2 ;;
	--ik-cmake) ik_cmake=$2; shift 2 ;;
	--avx2) avx2=1; shift ;;
	--types) types=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--shape) shape=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "compare-llama: unknown flag $1 (--help)" >&2; exit 2 ;;
	esac
done
[ -n "$mainline_src$mainline_bin" ] || { echo "compare-llama: --mainline SRC or --mainline-bin BIN is required" >&2; exit 2; }
[ -n "$ik_src$ik_bin" ] || { echo "compare-llama: --ik SRC or --ik-bin BIN is required" >&2; exit 2; }
for tool in cmake curl python3 go; do
	command -v "$tool" >/dev/null || { echo "compare-llama: $tool not found" >&2; exit 1; }
done

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
variant=native
cmake_isa=(-DGGML_NATIVE=ON)
godebug=${GODEBUG:-}
if [ "$avx2" = 1 ]; then
	variant=avx2
	cmake_isa=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF)
	godebug=cpu.avx512f=off,cpu.avx512bw=off,cpu.avx512vnni=off,cpu.avx512vl=off
fi
IFS=, read -r s_layers s_dim s_heads s_kv s_ff s_vocab <<<"$shape"
[ -n "$s_vocab" ] || { echo "compare-llama: --shape needs six numbers, got $shape" >&2; exit 2; }
models="$work/models/${shape//,/-}"
mkdir -p "$models" "$work/logs" "$work/bin"

# build NAME SRC EXTRA: llama-server from SRC, once per variant and set
# of extra cmake options (EXTRA, split on blanks).
build() {
	local name=$1 src=$2 extra=$3 dir="$work/build-$1-$variant"
	local -a more=()
	if [ -n "$extra" ]; then
		read -r -a more <<<"$extra"
		dir="$dir-$(printf '%s' "$extra" | cksum | cut -d' ' -f1)"
	fi
	if [ ! -x "$dir/bin/llama-server" ]; then
		[ -f "$src/CMakeLists.txt" ] || { echo "compare-llama: $src is not a llama.cpp source tree" >&2; exit 1; }
		echo "building $name llama-server ($variant${extra:+, $extra}) in $dir" >&2
		cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
			"${cmake_isa[@]}" ${more[@]+"${more[@]}"} >"$dir.config.log" 2>&1 || { tail -20 "$dir.config.log" >&2; exit 1; }
		cmake --build "$dir" --target llama-server -j "$jobs" >"$dir.build.log" 2>&1 || { tail -20 "$dir.build.log" >&2; exit 1; }
	fi
	echo "$dir/bin/llama-server"
}
[ -n "$mainline_bin" ] || mainline_bin=$(build mainline "$mainline_src" "$mainline_cmake")
[ -n "$ik_bin" ] || ik_bin=$(build ik "$ik_src" "$ik_cmake")
[ "$mainline_bin" != none ] || [ "$ik_bin" != none ] || { echo "compare-llama: nothing to compare with" >&2; exit 2; }
# Absolute, as the servers start from the work directory.
abs() { if [ "$1" = none ]; then echo none; else echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; fi; }
mainline_bin=$(abs "$mainline_bin") ik_bin=$(abs "$ik_bin")

(cd "$root" && go build -o "$work/bin/" ./cmd/mesh-gguf ./cmd/meshctl)

# The prompt: 128 token ids every vocabulary of 32000 has, not BOS/EOS.
prompt=$(python3 -c 'print([1] + [(i * 7919) % 31000 + 500 for i in range(127)])')

# wait_up PORT PID LOG: until /health answers 200, or the server died.
wait_up() {
	for _ in $(seq 1 600); do
		kill -0 "$2" 2>/dev/null || { echo "compare-llama: server on port $1 exited; its log:" >&2; tail -20 "$3" >&2; return 1; }
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
		sleep 0.5
	done
	echo "compare-llama: server on port $1 did not come up" >&2
	return 1
}

# complete PORT: one request; prints "prompt_tps decode_tps".
complete() {
	curl -sf "http://127.0.0.1:$1/completion" -H 'Content-Type: application/json' \
		-d "{\"prompt\": $prompt, \"n_predict\": 32, \"ignore_eos\": true, \"temperature\": 0, \"cache_prompt\": false}" |
		python3 -c 'import json, sys
t = json.load(sys.stdin)["timings"]
print("%.4f %.4f" % (1000 * t["prompt_n"] / t["prompt_ms"], 1000 * t["predicted_n"] / t["predicted_ms"]))'
}

# The servers run in the work directory: a llama-server may write a
# log file (llama.log) into its working directory, which must not be
# the checkout.
cd "$work"

pids=()
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_all EXIT

results="$work/results-$variant.txt"
: >"$results"
for typ in $types; do
	model="$models/$typ.gguf"
	if [ ! -s "$model" ]; then
		"$work/bin/meshctl" model synth -o "$model.tmp" -layers "$s_layers" -dim "$s_dim" -heads "$s_heads" \
			-kv-heads "$s_kv" -ff "$s_ff" -vocab "$s_vocab" -ctx 2048 -type "$typ" >/dev/null
		mv "$model.tmp" "$model"
	fi
	for t in $threads; do
		log="$work/logs/$typ-$t-$variant"
		GODEBUG=$godebug "$work/bin/mesh-gguf" -m "$model" -t "$t" -c 512 --port 18181 >"$log-mesh.log" 2>&1 &
		pids+=($!)
		wait_up 18181 "${pids[-1]}" "$log-mesh.log"
		servers=(mesh:18181)
		if [ "$mainline_bin" != none ]; then
			"$mainline_bin" -m "$model" -t "$t" -tb "$t" -c 512 -np 1 --port 18182 >"$log-mainline.log" 2>&1 &
			pids+=($!)
			wait_up 18182 "${pids[-1]}" "$log-mainline.log"
			servers+=(mainline:18182)
		fi
		if [ "$ik_bin" != none ]; then
			"$ik_bin" -m "$model" -t "$t" -tb "$t" -c 512 -np 1 --port 18183 >"$log-ik.log" 2>&1 &
			pids+=($!)
			wait_up 18183 "${pids[-1]}" "$log-ik.log"
			servers+=(ik:18183)
		fi
		for s in "${servers[@]}"; do complete "${s##*:}" >/dev/null; done # warm up
		for r in $(seq 1 "$rounds"); do
			for s in "${servers[@]}"; do
				echo "$typ $t ${s%%:*} $r $(complete "${s##*:}")" >>"$results"
			done
		done
		stop_all
	done
done

python3 - "$results" "$variant" "$threads" <<'EOF'
import statistics, sys
path, variant, threads = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows = {}
for line in open(path):
    typ, t, srv, _, p, d = line.split()
    rows.setdefault((typ, t, srv), []).append((float(p), float(d)))
med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in rows.items()}
types = list(dict.fromkeys(k[0] for k in rows))
cols = [("decode", t, 1) for t in threads] + [("prompt", t, 0) for t in threads]
print(f"mesh-gguf / mainline llama.cpp / ik_llama.cpp ({variant}); medians of interleaved rounds")
print("| type | " + " | ".join(f"{n} {t}t" for n, t, _ in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for typ in types:
    cells = []
    for _, t, i in cols:
        m, a, k = (med.get((typ, t, s)) for s in ("mesh", "mainline", "ik"))
        cells.append(" / ".join("%.2f" % (m[i] / o[i]) if m and o else "-" for o in (a, k)))
    print(f"| {typ} | " + " | ".join(cells) + " |")
print()
print("absolute t/s, mesh-gguf / mainline / ik_llama.cpp")
print("| type | " + " | ".join(f"{n} {t}t" for n, t, _ in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for typ in types:
    cells = []
    for _, t, i in cols:
        v = [med.get((typ, t, s)) for s in ("mesh", "mainline", "ik")]
        cells.append(" / ".join("%.1f" % x[i] if x else "-" for x in v))
    print(f"| {typ} | " + " | ".join(cells) + " |")
EOF
