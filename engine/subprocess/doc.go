// Package subprocess owns the local GGUF engine as a managed child process:
// it starts the runner (the built-in mesh-gguf or an installed llama.cpp
// llama-server), waits for it to become healthy, serves requests over the
// runner's HTTP API, restarts it when it crashes, and stops it. Running the
// engine in its own process means a crash in the decoder cannot take the
// agent down, and the span the energy meter wraps is the engine's work.
//
// # Process management
//
// The runner is started directly (no shell, so signals reach it) in its own
// process group with Pdeathsig set, on a port chosen by binding 127.0.0.1:0
// and releasing it. If the child loses the race for that port (it exits
// before becoming healthy and its output reports a bind failure) the start
// is retried on a fresh port. Readiness is GET /health answering 200; 503
// means the model is still loading and the wait continues up to
// Config.HealthTimeout. A child that exits first, or never becomes healthy,
// fails the start with its exit status and its last output lines (a bounded
// ring of the last 20 lines of stdout and stderr together).
//
// After a successful Start a supervisor restarts a crashed child with
// exponential backoff (Config.RestartBackoff doubling up to
// Config.MaxRestartBackoff, reset once a child has stayed up for
// Config.HealthyReset). Stop sends SIGTERM to the process group, waits
// Config.StopGrace, then SIGKILLs the group, so nothing the runner spawned
// survives it.
//
// # Command line
//
// The runner's --help output is read once per Start and decides which
// optional flags are passed, since llama.cpp builds differ:
//
//	-m MODEL --host 127.0.0.1 --port P            always
//	-c N, -t N                                    when configured (refused if unlisted)
//	-np 1                                         when listed: one slot, so one serve at a time
//	--no-warmup                                   only when Config.NoWarmup and listed
//	-md DRAFT                                     when a draft model is configured
//	--spec-type draft-simple                      with -md, when the build lists draft-simple
//	--spec-draft-n-max N | --draft-max N | --draft N
//	                                              with Config.DraftMax > 0: the first one
//	                                              listed, newest spelling first
//	--spec-draft-n-min N | --draft-min N | --draft-n-min N
//	                                              with Config.DraftMin > 0, likewise
//	--cache-type-k K --cache-type-v V             when Config.CacheTypeK/V are set: both,
//	                                              always (refused if unlisted)
//	--lora F | --lora-scaled F S                  per adapter (refused if unlisted)
//
// The KV cache type is set only through Config.CacheTypeK/V, which the
// recipe names: extra args that set it (-ctk, --cache-type-k, -ctv,
// --cache-type-v, with "=" or a separate value) and Env entries of
// llama-server's LLAMA_ARG_CACHE_TYPE_K/V are refused, and those two
// variables are removed from the environment the child inherits.
//
// Warm-up is left on by default: it moves one-time graph setup out of the
// first metered serve.
//
// # Outcome mapping (mesh/1 §5)
//
// Serve posts /completion with the prompt text, n_predict = max_tokens,
// cache_prompt, temperature, seed and return_tokens, and maps the response:
//
//	tokens_in        = tokens_evaluated (the whole prompt, cached part included)
//	tokens_out       = tokens_predicted
//	tokens_accepted  = tokens_out                   greedy: no draft model, draft_n absent or 0
//	                 = timings.draft_n_accepted     speculative: a draft model in the recipe,
//	                                                or draft_n > 0 (absent: 0)
//	cache_hit_tokens = timings.cache_n          (absent: 0)
//	spec_proposed    = timings.draft_n          (absent: 0)
//	spec_accepted    = timings.draft_n_accepted (absent: 0)
//
// tokens_accepted follows §5's sentence: for greedy decode it equals
// tokens_out, under speculative decoding it is the number of proposed
// tokens the target model accepted. It is the denominator of the wedge
// metric (µJ per accepted token), so the mapping never credits more than
// the engine reported: the tokens the target sampled itself after a
// rejected draft are delivered (tokens_out) but were not proposed, and
// are not counted. When the recipe has a draft model but the engine
// reports no draft counters (llama-server omits them when nothing was
// drafted), tokens_accepted is 0: the receipt then claims no accepted
// tokens and carries no wedge figure, rather than an efficiency figure the
// engine did not attest.
//
// cache_hit_tokens is §5's prefix cache, read as PROFILE §12 reads it: the
// prompt tokens whose keys and values the engine reused from a slot's KV
// cache instead of evaluating them, timings.cache_n (llama-server's
// n_prompt_tokens_cache; mesh-gguf reports the same). It is a count of
// prompt work skipped, never output served from a stored answer: the
// model still generates every output token. An engine that omits cache_n
// claims no hits; tokens_evaluated − timings.prompt_n is not taken for
// one. The top-level tokens_cached field is not used either: it is the
// number of tokens held in the slot after the serve (prompt plus
// generated, slot.n_past). Every path maps the same fields of the same
// response: a plain serve, a streamed one (the final event's timings), a
// chat (rendered, then served as a prompt) and so every OpenAI or Ollama
// call the daemon turns into one of these.
//
// Every timings field is optional. A response is refused, rather than
// mapped, when a count is negative or beyond u32, when tokens_predicted
// exceeds n_predict, when timings.predicted_n or the returned tokens
// disagree with tokens_predicted, when a cache or prompt count exceeds
// tokens_evaluated or the two together do, when draft_n_accepted exceeds
// draft_n or the tokens
// delivered (tokens_accepted would exceed tokens_out), or when the engine
// truncated the prompt (the model did not see the prompt whose hash the
// receipt names).
//
// A serve interrupted by the child dying fails with an error wrapping
// ErrCrashed that carries the exit status and the child's last output; no
// outcome is returned, and the supervisor restarts the child.
//
// # Streaming and chat (engine.OptionBackend)
//
// ServeWith with Options.Emit posts the same /completion with "stream":
// true and reads llama-server's server-sent events ("data: <json>\n\n").
// Each partial event's content is emitted as it arrives; the final event
// (stop true) is mapped by the same rules as a non-streamed response, and
// must agree with the stream: its content is empty (llama-server sends it
// in the partial events only), and when the partial events count tokens
// (their token lists, or their running tokens_predicted) tokens_predicted
// equals the count streamed. A malformed stream, an event over its bound
// (1 MiB plus six bytes per prompt byte, for the prompt the final event
// echoes) or a stream over 64 MiB is ErrBadResponse; an error event fails
// the serve; the child dying mid-stream is ErrCrashed. An Emit error
// closes the response body, dropping the connection, which cancels the
// generation in the child, and is returned wrapped.
//
// With Options.Chat the prompt is the JSON messages engine.ParseChat
// accepts (they are what prompt_hash addresses). They are rendered by the
// child with the model's own template, POST /apply-template
// {"messages": [...]} → {"prompt": "..."}, and the rendered prompt is
// served as above, so tokens_in is the engine's count of the rendered
// prompt. /apply-template answering 501 (mesh-gguf on a model without a
// chat template) or 404 (a llama-server build without the endpoint) is
// engine.ErrNoChat; 400 (the template refused the conversation) is
// wire.ErrBadRequest.
//
// # Recipe
//
// The backend's recipe is package recipe's string for the model file, the
// draft model, the KV cache type when one is set and any adapters, e.g.
// "gguf:<cid>+draft:<cid>+kv:q8_0/q8_0". It is
// recomputed (from the cache: a stat when nothing changed) at every start
// and checked again once the child is healthy, so a model file replaced
// between hashing and loading fails the start instead of being misnamed.
package subprocess
