// Package chat renders a model's chat template — the Jinja source GGUF
// files carry in tokenizer.chat_template — into the prompt text for a
// conversation, as llama-server's /apply-template and chat completions do.
//
// Templates run with the conventions of Hugging Face's apply_chat_template:
// trim_blocks and lstrip_blocks, the variables messages,
// add_generation_prompt, bos_token and eos_token, and the helpers
// raise_exception and strftime_now. A model without a template gets
// ChatML, which is also llama.cpp's fallback.
package chat

import (
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"

	"meshd/engine/runner/gguf"
)

// MetadataKey is the GGUF key that holds a model's chat template.
const MetadataKey = "tokenizer.chat_template"

// ChatML is the template used for models that carry none (llama.cpp's
// fallback too): <|im_start|>role\ncontent<|im_end|>\n per message, then
// <|im_start|>assistant\n when a generation prompt is asked for.
const ChatML = `{%- for message in messages -%}
  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}`

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options are the values a render passes to the template besides the
// messages.
type Options struct {
	// AddGenerationPrompt asks the template to open the assistant's turn.
	AddGenerationPrompt bool
	// BOS and EOS are the texts of the model's BOS and EOS tokens, exposed
	// as bos_token and eos_token.
	BOS, EOS string
	// TokenizerAddsBOS removes a leading BOS text from the output, and
	// TokenizerAddsEOS a trailing EOS text, because tokenizing with
	// special tokens will add them (llama.cpp does the same, so the
	// prompt does not start with two BOS tokens).
	TokenizerAddsBOS, TokenizerAddsEOS bool
	// Now is the time strftime_now formats; the zero value means the time
	// of the render.
	Now time.Time
	// Vars are further template variables (for example tools,
	// date_string or enable_thinking) as JSON-like Go values: nil, bool,
	// int, int64, float64, string, []any and map[string]any. They cannot
	// replace the variables above.
	Vars map[string]any
}

// Template is a parsed chat template, safe for concurrent renders.
type Template struct {
	src      string
	fallback bool
	tmpl     *jinja.Template
}

// Parse compiles a chat template.
func Parse(src string) (*Template, error) {
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat: parse template: %w", err)
	}
	return &Template{src: src, tmpl: t}, nil
}

// Default is the ChatML template used when a model has none.
func Default() *Template {
	t, err := Parse(ChatML)
	if err != nil {
		panic(err) // a constant that compiles in the tests
	}
	t.fallback = true
	return t
}

// FromGGUF parses the file's tokenizer.chat_template, or returns Default
// when the key is missing or empty.
func FromGGUF(f *gguf.File) (*Template, error) {
	src, ok := f.String(MetadataKey)
	if !ok || strings.TrimSpace(src) == "" {
		return Default(), nil
	}
	t, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MetadataKey, err)
	}
	return t, nil
}

// Source is the template's Jinja source.
func (t *Template) Source() string { return t.src }

// IsDefault reports whether the template is the ChatML fallback chosen for
// a model without one.
func (t *Template) IsDefault() bool { return t.fallback }

// Render formats msgs into the prompt text. Errors raised by the template
// (raise_exception, for example a role it does not accept) come back as
// errors.
func (t *Template) Render(msgs []Message, opts Options) (string, error) {
	data := make(map[string]jinja.Value, len(opts.Vars)+6)
	for k, v := range opts.Vars {
		data[k] = jinja.FromGoValue(v)
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	now := opts.Now
	data["messages"] = jinja.NewList(list)
	data["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(opts.BOS)
	data["eos_token"] = jinja.NewString(opts.EOS)
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: want one format string")
		}
		at := now
		if at.IsZero() {
			at = time.Now()
		}
		return jinja.NewString(Strftime(at, args[0].AsString())), nil
	})
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception called"
		if len(args) > 0 && args[0].IsString() {
			msg = args[0].AsString()
		}
		return jinja.Undefined(), fmt.Errorf("template raised: %s", msg)
	})
	out, err := t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat: render template: %w", err)
	}
	if opts.TokenizerAddsBOS && opts.BOS != "" {
		out = strings.TrimPrefix(out, opts.BOS)
	}
	if opts.TokenizerAddsEOS && opts.EOS != "" {
		out = strings.TrimSuffix(out, opts.EOS)
	}
	return out, nil
}

// Strftime formats t with C strftime directives, the subset chat templates
// use: %Y %y %m %d %e %H %I %M %S %p %b %B %a %A %j %Z %z %%, and glibc's
// %-d style (no padding) for the numeric ones. Other directives are kept
// as written.
func Strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(v, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, v)
			} else {
				fmt.Fprintf(&b, "%d", v)
			}
		}
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
