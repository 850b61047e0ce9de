// Package runner is the GGUF model runner behind the mesh-gguf engine
// binary: a pure-Go reader of GGUF files (gguf), the quantised matrix
// kernels (kernels), the transformer forward pass and sampling (llama),
// the tokenizers (tokenizer) and a llama-server-compatible HTTP server
// (llamaserver). Nothing in it knows of meshd: it serves completions, and
// meshd's engine adapter (engine/subprocess) meters and seals them.
package runner
