package chat

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
)

// The templates in testdata are the tokenizer.chat_template strings of
// Meta-Llama-3-8B-Instruct, Llama-3.2-1B-Instruct, Qwen2.5-Instruct,
// SmolLM2-Instruct and Mistral-7B-Instruct-v0.1/v0.2.
func load(t *testing.T, name string) *Template {
	t.Helper()
	src, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tmpl
}

var (
	sys  = Message{Role: "system", Content: "You are a helpful assistant."}
	hi   = Message{Role: "user", Content: "Hi there!"}
	ans  = Message{Role: "assistant", Content: "Hello! How can I help?"}
	more = Message{Role: "user", Content: "What is 2+2?"}
)

func TestRealTemplates(t *testing.T) {
	day := time.Date(2025, time.March, 7, 15, 4, 5, 0, time.UTC)
	cases := []struct {
		name, file string
		msgs       []Message
		opts       Options
		want       string
	}{
		{"llama3 conversation", "llama3.jinja", []Message{sys, hi, ans, more},
			Options{AddGenerationPrompt: true, BOS: "<|begin_of_text|>", EOS: "<|eot_id|>"},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3 trims content, no generation prompt", "llama3.jinja", []Message{{Role: "user", Content: "  padded \n"}},
			Options{BOS: "<|begin_of_text|>"},
			"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\npadded<|eot_id|>"},
		{"llama3 BOS left to the tokenizer", "llama3.jinja", []Message{hi},
			Options{AddGenerationPrompt: true, BOS: "<|begin_of_text|>", TokenizerAddsBOS: true},
			"<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3.2 dates the system prompt", "llama3.2.jinja", []Message{sys, hi},
			Options{AddGenerationPrompt: true, BOS: "<|begin_of_text|>", Now: day},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
				"Cutting Knowledge Date: December 2023\nToday Date: 07 Mar 2025\n\n" +
				"You are a helpful assistant.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3.2 date_string from Vars", "llama3.2.jinja", []Message{hi},
			Options{BOS: "<|begin_of_text|>", Now: day, Vars: map[string]any{"date_string": "26 Jul 2024"}},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
				"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"},
		{"qwen2.5 default system prompt", "qwen2.5.jinja", []Message{hi},
			Options{AddGenerationPrompt: true, BOS: "<|endoftext|>", EOS: "<|im_end|>"},
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2.5 conversation", "qwen2.5.jinja", []Message{sys, hi, ans, more},
			Options{AddGenerationPrompt: true, EOS: "<|im_end|>"},
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n" +
				"<|im_start|>assistant\nHello! How can I help?<|im_end|>\n" +
				"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2.5 tool results", "qwen2.5.jinja", []Message{hi, {Role: "tool", Content: "42"}, {Role: "tool", Content: "43"}},
			Options{},
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n43\n</tool_response><|im_end|>\n"},
		{"qwen2.5 tools from Vars", "qwen2.5.jinja", []Message{hi},
			Options{Vars: map[string]any{"tools": []any{map[string]any{"name": "now"}}}},
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n" +
				"You may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"name": "now"}` + "\n</tools>\n\n" +
				"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
				"<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n"},
		{"smollm2 injects its system prompt", "smollm2.jinja", []Message{hi},
			Options{AddGenerationPrompt: true},
			"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"},
		{"smollm2 keeps a given system prompt", "smollm2.jinja", []Message{sys, hi, ans},
			Options{},
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"},
		{"mistral conversation", "mistral.jinja", []Message{hi, ans, more},
			Options{AddGenerationPrompt: true, BOS: "<s>", EOS: "</s>"},
			"<s>[INST] Hi there! [/INST]Hello! How can I help?</s>[INST] What is 2+2? [/INST]"},
		{"mistral BOS left to the tokenizer", "mistral.jinja", []Message{hi},
			Options{BOS: "<s>", EOS: "</s>", TokenizerAddsBOS: true},
			"[INST] Hi there! [/INST]"},
	}
	for _, c := range cases {
		got, err := load(t, c.file).Render(c.msgs, c.opts)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestRaiseException(t *testing.T) {
	mistral := load(t, "mistral.jinja")
	cases := []struct {
		msgs []Message
		want string
	}{
		{[]Message{sys, hi}, "Conversation roles must alternate user/assistant/user/assistant/..."},
		{[]Message{hi, hi}, "Conversation roles must alternate"},
		{[]Message{hi, {Role: "tool", Content: "x"}}, "Only user and assistant roles are supported!"},
	}
	for _, c := range cases {
		out, err := mistral.Render(c.msgs, Options{BOS: "<s>", EOS: "</s>"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %q, %v; want an error with %q", c.msgs, out, err, c.want)
		}
	}
}

func TestDefaultIsChatML(t *testing.T) {
	want := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"
	for _, c := range []struct {
		name string
		kv   map[string]string
		def  bool
	}{
		{"no key", nil, true},
		{"empty key", map[string]string{MetadataKey: " \n"}, true},
		{"own template", map[string]string{MetadataKey: ChatML + "{{ '!' }}"}, false},
	} {
		var w gguf.Writer
		w.AddKV("general.architecture", "llama")
		for k, v := range c.kv {
			w.AddKV(k, v)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := FromGGUF(f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := tmpl.Render([]Message{sys, hi}, Options{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		wantHere := want
		if !c.def {
			wantHere += "!"
		}
		if tmpl.IsDefault() != c.def || got != wantHere {
			t.Errorf("%s: default %v, rendered %q; want %v, %q", c.name, tmpl.IsDefault(), got, c.def, wantHere)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{"{% if %}", "{% for m in messages %}never closed", "{{ 'unterminated }}"} {
		if _, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) accepted a broken template", src)
		}
	}
	var w gguf.Writer
	w.AddKV(MetadataKey, "{% endfor %}")
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), MetadataKey) {
		t.Errorf("FromGGUF with a broken template: %v", err)
	}
}

func TestReservedVarsWinOverVars(t *testing.T) {
	tmpl, err := Parse("{{ bos_token }}|{{ messages | length }}|{{ extra }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{hi}, Options{BOS: "<s>", Vars: map[string]any{"bos_token": "X", "messages": []any{}, "extra": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if got != "<s>|1|7" {
		t.Errorf("got %q, want %q", got, "<s>|1|7")
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, time.July, 5, 9, 3, 7, 0, time.FixedZone("CEST", 2*3600))
	for _, c := range []struct{ format, want string }{
		{"%d %b %Y", "05 Jul 2024"},
		{"%-d %B %Y", "5 July 2024"},
		{"%Y-%m-%d %H:%M:%S", "2024-07-05 09:03:07"},
		{"%A %a %y %j", "Friday Fri 24 187"},
		{"%I:%M %p %Z %z", "09:03 AM CEST +0200"},
		{"%-I%%%e|%Q", "9% 5|%Q"},
		{"trailing %", "trailing %"},
	} {
		if got := Strftime(at, c.format); got != c.want {
			t.Errorf("Strftime(%q) = %q, want %q", c.format, got, c.want)
		}
	}
}
