package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

// The expected splits follow each regex as llama.cpp applies it (see
// pretok.go); they were derived from the regex semantics and agree with
// Python's regex module running the same patterns stage by stage.
func TestPreTokenizerSplits(t *testing.T) {
	cases := []struct {
		pre, in string
		want    []string
	}{
		{"gpt-2", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'s", " 2024", "\n", " ok"}},
		{"gpt-2", "I'm you're we've they'll he'd it's", []string{"I", "'m", " you", "'re", " we", "'ve", " they", "'ll", " he", "'d", " it", "'s"}},
		{"gpt-2", "I'M YOU'RE IT'S", []string{"I", "'", "M", " YOU", "'", "RE", " IT", "'", "S"}},
		{"gpt-2", "1 12 1234567", []string{"1", " 12", " 1234567"}},
		{"gpt-2", "trailing spaces   ", []string{"trailing", " spaces", "   "}},
		{"gpt-2", "a  b\t\tc", []string{"a", " ", " b", "\t", "\t", "c"}},
		{"gpt-2", "line1\nline2\r\n\n end", []string{"line", "1", "\n", "line", "2", "\r\n\n", " end"}},
		{"gpt-2", "café naïve", []string{"cafe", "́", " naïve"}},
		{"gpt-2", "日本語のテキスト、中文。", []string{"日本語のテキスト", "、", "中文", "。"}},
		{"gpt-2", "emoji 🙂!! 👨‍👩‍👧", []string{"emoji", " 🙂!!", " 👨‍👩‍👧"}},
		{"gpt-2", "tabs\tand nbsp", []string{"tabs", "\t", "and", " ", "nbsp"}},
		{"gpt-2", "$100 + 5 <= x^2", []string{"$", "100", " +", " 5", " <=", " x", "^", "2"}},
		{"olmo", "I'M here  now", []string{"I", "'", "M", " here", " ", " now"}},
		{"llama-bpe", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'s", " ", "202", "4", "\n", " ok"}},
		{"llama-bpe", "I'M YOU'RE WE'VE THEY'LL HE'D IT'S", []string{"I", "'M", " YOU", "'RE", " WE", "'VE", " THEY", "'LL", " HE", "'D", " IT", "'S"}},
		{"llama-bpe", "'s 'S 'x ' s", []string{"'s", " '", "S", " '", "x", " '", " s"}},
		{"llama-bpe", "1 12 123 1234 12345 1234567", []string{"1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456", "7"}},
		{"llama-bpe", "x1y22z333w4444", []string{"x", "1", "y", "22", "z", "333", "w", "444", "4"}},
		{"llama-bpe", "3.14159 and 1,000,000", []string{"3", ".", "141", "59", " and", " ", "1", ",", "000", ",", "000"}},
		{"llama-bpe", "trailing spaces   ", []string{"trailing", " spaces", "   "}},
		{"llama-bpe", "   leading", []string{"  ", " leading"}},
		{"llama-bpe", "line1\nline2\r\nline3\n\n\nend", []string{"line", "1", "\n", "line", "2", "\r\n", "line", "3", "\n\n\n", "end"}},
		{"llama-bpe", "  \n  indented\n\tTab\tsep\t\t", []string{"  \n", " ", " indented", "\n", "\tTab", "\tsep", "\t\t"}},
		{"llama-bpe", "?!\n\nnext", []string{"?!\n\n", "next"}},
		{"llama-bpe", " !!!\n\n", []string{" !!!\n\n"}},
		{"llama-bpe", "café naïve", []string{"cafe", "́", " nai", "̈ve"}},
		{"llama-bpe", "日本語のテキスト、中文文本。", []string{"日本語のテキスト", "、中文文本", "。"}},
		{"llama-bpe", "Привет мир", []string{"Привет", " мир"}},
		{"llama-bpe", "emoji 🙂!! ok👍🏽", []string{"emoji", " 🙂!!", " ok", "👍🏽"}},
		{"llama-bpe", "tabs\tand nbsp　ideo", []string{"tabs", "\tand", " nbsp", "　ideo"}},
		{"llama-bpe", "Ⅻ ½ ²³ ٣٤٥", []string{"Ⅻ", " ", "½", " ", "²³", " ", "٣٤٥"}},
		{"llama-bpe", "a​b", []string{"a", "​b"}},
		{"llama3", "x1234", []string{"x", "123", "4"}},
		{"dbrx", "You'RE 12345", []string{"You", "'RE", " ", "123", "45"}},
		{"smaug-bpe", "You'RE 12345", []string{"You", "'RE", " ", "123", "45"}},
		{"qwen2", "1234567 x12", []string{"1", "2", "3", "4", "5", "6", "7", " x", "1", "2"}},
		{"qwen2", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'s", " ", "2", "0", "2", "4", "\n", " ok"}},
		{"qwen2", "I'M 'll\n\n", []string{"I", "'M", " '", "ll", "\n\n"}},
		{"qwen2", "日本語 2024年", []string{"日本語", " ", "2", "0", "2", "4", "年"}},
		{"default", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'", "s", " ", "202", "4", "\n", " ok"}},
		{"default", "1234567 and 12345", []string{"123", "456", "7", " and", " ", "123", "45"}},
		{"default", "$100 + 5 <= x^2 ~ y | z `c`", []string{"$", "100", " ", "+", " ", "5", " ", "<=", " x", "^", "2", " ", "~", " y", " ", "|", " z", " `", "c", "`"}},
		{"default", "...!!! ok", []string{"...!!!", " ok"}},
		{"default", "don't", []string{"don", "'", "t"}},
		{"gpt2", "don't 12345", []string{"don", "'", "t", " ", "123", "45"}},
		{"smollm", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'s", " ", "2", "0", "2", "4", "\n", " ok"}},
		{"smollm", "x1y22z333 1234", []string{"x", "1", "y", "2", "2", "z", "3", "3", "3", " ", "1", "2", "3", "4"}},
		{"smollm", " 42", []string{" ", "4", "2"}},
		{"smollm", "I'm 3 ½", []string{"I", "'m", " ", "3", " ", "½"}},
		{"starcoder", "f(x1, 23)  ", []string{"f", "(", "x", "1", ",", " ", "2", "3", ")", "  "}},
		{"refact", "f(x1, 23)  ", []string{"f", "(", "x", "1", ",", " ", "2", "3", ")", "  "}},
		{"command-r", "f(x1, 23)  ", []string{"f", "(", "x", "1", ",", " ", "2", "3", ")", "  "}},
		{"falcon", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'", "s", " ", "202", "4", "\n", " ok"}},
		{"falcon", "1234567 x", []string{"123", "456", "7", " x"}},
		{"falcon", "$100 + 5 <= x^2 ~ y | z `c`", []string{"$", "100", " ", "+", " 5", " ", "<=", " x", "^", "2", " ", "~", " y", " ", "|", " z", " ", "`", "c", "`"}},
		{"falcon", "don't", []string{"don", "'", "t"}},
		{"deepseek-llm", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'", "s", " ", "2024", "\n", " ok"}},
		{"deepseek-llm", "café 日本語 한국어", []string{"caf", "é", " ", "日本語", " ", "한국어"}},
		{"deepseek-llm", "ＡＢＣ！？", []string{"ＡＢＣ", "！？"}},
		{"deepseek-llm", "end  ", []string{"end", "  "}},
		{"deepseek-llm", "a　b", []string{"a", "　b"}},
		{"deepseek-llm", "1234 ½", []string{"1234", " ", "½"}},
		{"deepseek-llm", "Ω K ΐ ώ", []string{"Ω", " ", "K", " ", "ΐ", " ", "ώ"}},
		{"deepseek-coder", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'", "s", " ", "2", "0", "2", "4", "\n", " ok"}},
		{"deepseek-coder", "日本語 x1", []string{"日本語", " x", "1"}},
		{"tekken", "HTTPServer getHTTPResponse XMLHttpRequest", []string{"HTTPServer", " get", "HTTPResponse", " XMLHttp", "Request"}},
		{"tekken", "Hello, world!  It's 2024\n ok", []string{"Hello", ",", " world", "!", " ", " It", "'s", " ", "2", "0", "2", "4", "\n", " ok"}},
		{"tekken", "path/to/file\n/x", []string{"path", "/to", "/file", "\n", "/x"}},
		{"tekken", "ÉCOLE école", []string{"É", "COLE", " école"}},
		{"tekken", "a1b", []string{"a", "1", "b"}},
	}
	for _, c := range cases {
		p, err := NewPreTokenizer(c.pre)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Split(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Split(%q)\n got %q\nwant %q", c.pre, c.in, got, c.want)
		}
	}
}

// corpus is the tricky text every pre-tokenizer and vocabulary must
// survive: contractions in both cases, digit runs, combining marks, CJK,
// emoji sequences, whitespace runs of every kind, mixed scripts.
var corpus = []string{
	"Hello, world!  It's 2024\n ok",
	"I'm you're we've they'll he'd it's · I'M YOU'RE WE'VE THEY'LL HE'D IT'S",
	"1 12 123 1234 12345 1234567 3.14159 1,000,000",
	"cafe\u0301 na\u00efve re\u0301sume\u0301 Ελληνικά Привет мир مرحبا",
	"日本語のテキスト、中文文本。한국어 텍스트",
	"emoji 🙂!! 👨\u200d👩\u200d👧 ok👍🏽",
	"trailing spaces   ",
	"   leading spaces",
	"line1\nline2\r\nline3\n\n\nend\n",
	"  \n  indented\n\tTab\tsep\t\t",
	"tabs\tand\u00a0nbsp\u3000ideo\u2028sep",
	"HTTPServer getHTTPResponse path/to/file.go:42",
	"$100 + 5 <= x^2 ~ y | z `code` ¿Qué? «quoted»",
	"\u216b \u00bd \u00b2\u00b3 \u0663\u0664\u0665 \u2126 \u212a",
	"a\u200bb",
	"\n",
	" ",
	"x",
	"",
}

func TestSplitCoversText(t *testing.T) {
	for _, name := range PreTokenizerNames() {
		p, err := NewPreTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(corpus, "\xff\xfe invalid \xc3") {
			words := p.Split(s)
			if got := strings.Join(words, ""); got != s {
				t.Errorf("%s: Split(%q) joins to %q", name, s, got)
			}
			for _, w := range words {
				if w == "" {
					t.Errorf("%s: Split(%q) has an empty word: %q", name, s, words)
				}
			}
		}
	}
}

// Names llama.cpp maps to one regex list split identically; names it maps
// to different lists do not.
func TestPreTokenizerAliases(t *testing.T) {
	groups := [][]string{
		{"gpt-2", "olmo", "mpt", "phi-2", "jais"},
		{"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe", "falcon3"},
		{"qwen2", "deepseek-r1-qwen", "stablelm2"},
		{"smollm", "starcoder", "refact", "command-r"},
		{"default", "gpt2", ""},
	}
	split := func(name string) [][]string {
		p, err := NewPreTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]string
		for _, s := range corpus {
			out = append(out, p.Split(s))
		}
		return out
	}
	for _, g := range groups {
		want := split(g[0])
		for _, n := range g[1:] {
			if !reflect.DeepEqual(split(n), want) {
				t.Errorf("%q splits differently from %q", n, g[0])
			}
		}
	}
	for i := range groups {
		for j := i + 1; j < len(groups); j++ {
			if reflect.DeepEqual(split(groups[i][0]), split(groups[j][0])) {
				t.Errorf("%q and %q split the corpus identically", groups[i][0], groups[j][0])
			}
		}
	}
}

func TestNewPreTokenizerRefusesUnknown(t *testing.T) {
	for _, name := range []string{"llama4-mystery", "LLAMA-BPE", "qwen"} {
		_, err := NewPreTokenizer(name)
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("NewPreTokenizer(%q) = %v, want an error naming it", name, err)
		}
	}
	tk, err := New("gpt2", []string{"a", "b"}, nil, nil, []string{"a b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.SetPreTokenizer("nope"); err == nil || tk.PreTokenizer() != "gpt-2" {
		t.Errorf("SetPreTokenizer(nope) = %v, left %q", err, tk.PreTokenizer())
	}
}
