//go:build unix

package subprocess

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"

	"meshd/engine"
	"meshd/wire"
)

// maxEventBase bounds one server-sent event beyond the prompt it may echo
// (llama-server's final event repeats the prompt text).
const maxEventBase = 1 << 20

// maxEvent bounds one event of a stream for a prompt of n bytes: JSON
// escapes a byte as at most six.
func maxEvent(n int) int {
	return int(min(int64(maxResponse), maxEventBase+6*int64(n)))
}

// applyTemplate renders msgs with the child's chat template: POST
// /apply-template {"messages": [...]} answers {"prompt": "..."}, as
// llama-server does. A child that cannot render chat (our runner on a
// model without a template answers 501; a llama-server build without the
// endpoint answers 404) gives engine.ErrNoChat; a conversation the
// template refuses (400, e.g. raise_exception) gives wire.ErrBadRequest.
func (e *Engine) applyTemplate(ctx context.Context, in *instance, msgs []engine.ChatMessage) (string, error) {
	resp, err := e.post(ctx, in, "/apply-template", map[string]any{"messages": msgs})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := e.readBody(ctx, in, resp)
	if err != nil {
		return "", err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusNotImplemented:
		return "", fmt.Errorf("serve: %w: /apply-template answered HTTP %d: %s", engine.ErrNoChat, resp.StatusCode, engineError(data))
	case http.StatusBadRequest:
		return "", fmt.Errorf("serve: %w: the engine's chat template refused the messages: %s", wire.ErrBadRequest, engineError(data))
	default:
		return "", fmt.Errorf("serve: rendering the chat: engine answered HTTP %d: %s", resp.StatusCode, engineError(data))
	}
	var r struct {
		Prompt *string `json:"prompt"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("serve: %w: /apply-template: malformed JSON: %v", ErrBadResponse, err)
	}
	if r.Prompt == nil {
		return "", fmt.Errorf("serve: %w: /apply-template: prompt is missing", ErrBadResponse)
	}
	return *r.Prompt, nil
}

// streamEvent is one event of a streamed /completion. Partial events
// (stop false) carry a piece of content, the tokens it came from and the
// running tokens_predicted; the final event (stop true) is the
// non-streamed response without the content and tokens already sent.
type streamEvent struct {
	Content         *string         `json:"content"`
	Stop            *bool           `json:"stop"`
	Tokens          *[]json.Number  `json:"tokens"`
	TokensPredicted count           `json:"tokens_predicted"`
	Error           json.RawMessage `json:"error"`
}

// stream runs one /completion with "stream": true, emitting each partial
// event's content as it arrives. The final event is mapped by
// parseCompletion, as a non-streamed response is, and must agree with
// what was streamed:
//
//   - its content is empty (the content went out in the partial events);
//   - when the partial events report tokens (their token lists, or their
//     running tokens_predicted, which counts tokens held back inside an
//     incomplete UTF-8 sequence too), tokens_predicted equals the count
//     streamed, so the outcome never claims tokens the caller was not sent;
//   - the running counts never decrease, and never fall below the tokens
//     listed so far.
//
// An error event fails the serve; a malformed stream fails it with
// ErrBadResponse. One event may be at most maxEvent bytes and the stream
// maxResponse. An Emit error closes the response body, which drops the
// connection and so cancels the engine's work, and is returned wrapped.
func (e *Engine) stream(ctx context.Context, in *instance, creq completionRequest, emit func([]byte) error) (engine.Result, error) {
	resp, err := e.post(ctx, in, "/completion", creq)
	if err != nil {
		return engine.Result{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, err := e.readBody(ctx, in, resp)
		if err != nil {
			return engine.Result{}, err
		}
		return engine.Result{}, fmt.Errorf("serve: engine answered HTTP %d: %s", resp.StatusCode, engineError(data))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return engine.Result{}, fmt.Errorf("serve: %w: asked for a stream, got Content-Type %q", ErrBadResponse, resp.Header.Get("Content-Type"))
	}
	bad := func(format string, a ...any) (engine.Result, error) {
		return engine.Result{}, fmt.Errorf("serve: %w: stream: "+format, append([]any{ErrBadResponse}, a...)...)
	}
	r := newEventReader(&boundedReader{r: resp.Body, left: maxResponse}, maxEvent(len(creq.Prompt)))
	var (
		out      []byte
		listed   int64 // tokens in the partial events' lists
		running  int64 // the last running tokens_predicted
		reported bool  // the partial events count tokens
		stopped  bool  // the final event says a stop word ended it
		final    *wire.ServeOutcome
	)
	for n := 0; ; n++ {
		field, data, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			if final == nil {
				if in.hasExited() {
					return engine.Result{}, e.serveFailed(ctx, in, errors.New("the stream ended before its final event"))
				}
				return bad("the stream ended before its final event")
			}
			return engine.Result{Outcome: *final, Output: out, Stopped: stopped}, nil
		case errors.Is(err, ErrBadResponse):
			return engine.Result{}, fmt.Errorf("serve: %w", err)
		case err != nil:
			return engine.Result{}, e.serveFailed(ctx, in, err)
		}
		if field == "error" {
			return engine.Result{}, fmt.Errorf("serve: engine failed mid-stream: %s", streamError(data))
		}
		if final != nil {
			if string(data) == "[DONE]" {
				continue
			}
			return bad("event %d follows the final event", n)
		}
		var ev streamEvent
		if malformed, trailing := decodeOne(data, &ev); malformed != nil {
			return bad("event %d: malformed JSON: %v", n, malformed)
		} else if trailing != nil {
			return bad("event %d: %v", n, trailing)
		}
		if ev.Error != nil {
			return engine.Result{}, fmt.Errorf("serve: engine failed mid-stream: %s", engineError(data))
		}
		if ev.Stop == nil {
			return bad("event %d has no stop flag", n)
		}
		if *ev.Stop {
			o, content, word, err := parseCompletionStop(data, creq.NPredict, e.cfg.DraftModel != "")
			if err != nil {
				return engine.Result{}, fmt.Errorf("serve: stream: final event: %w", err)
			}
			if content != "" {
				return bad("the final event repeats %d bytes of content", len(content))
			}
			streamed := max(listed, running)
			stopped = word
			if stopped && reported && int64(o.TokensOut) > streamed {
				// The tokens that made the stop word were decoded but
				// their text never sent: only what was streamed is
				// claimed.
				o.TokensOut = uint32(streamed)
				o.TokensAccepted = min(o.TokensAccepted, o.TokensOut)
				o.SpecAccepted = min(o.SpecAccepted, o.TokensOut)
			}
			if reported && int64(o.TokensOut) != streamed {
				return bad("tokens_predicted is %d but %d tokens were streamed", o.TokensOut, streamed)
			}
			final = &o
			continue
		}
		if ev.Content == nil {
			return bad("event %d has no content", n)
		}
		if ev.Tokens != nil {
			for _, t := range *ev.Tokens {
				if _, err := t.Int64(); err != nil {
					return bad("event %d: token %s is not an integer", n, t)
				}
			}
			listed += int64(len(*ev.Tokens))
			reported = reported || len(*ev.Tokens) > 0
		}
		if ev.TokensPredicted.set {
			c := ev.TokensPredicted.v
			if c < running || c < listed || c > math.MaxUint32 {
				return bad("event %d: tokens_predicted %d after %d, with %d tokens listed", n, c, running, listed)
			}
			running, reported = c, true
		}
		if *ev.Content == "" {
			continue
		}
		if err := ctx.Err(); err != nil {
			// Events already buffered are not delivered once the caller
			// has given up.
			return engine.Result{}, fmt.Errorf("serve: %w", err)
		}
		piece := []byte(*ev.Content)
		out = append(out, piece...)
		if err := emit(piece); err != nil {
			return engine.Result{}, fmt.Errorf("serve: output abandoned after %d bytes: %w", len(out)-len(piece), err)
		}
	}
}

// streamError is the message of an error event: llama-server's envelope,
// or the bare {"code","message","type"} object.
func streamError(data []byte) string {
	var bare struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(data, &bare) == nil && bare.Message != "" {
		if bare.Type != "" {
			return bare.Type + ": " + bare.Message
		}
		return bare.Message
	}
	return engineError(data)
}

// boundedReader fails, with ErrBadResponse, a body longer than left.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Only report the overflow if there is more to read.
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: stream exceeds %d bytes", ErrBadResponse, maxResponse)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// eventReader reads server-sent events as llama-server writes them:
// "data: <json>\n\n" (and "error: <json>\n\n" for a failure after the
// stream began). Comment lines and the event, id and retry fields are
// skipped; several data lines make one event joined by "\n"; lines may end
// in "\r\n". Any other line, an event over max bytes, or a stream that ends
// inside an event is an ErrBadResponse. Errors from the body itself are
// returned as they are, so that the caller can tell a broken connection
// from a malformed stream.
type eventReader struct {
	br  *bufio.Reader
	max int
}

func newEventReader(r io.Reader, max int) *eventReader {
	// A small buffer: line() joins longer lines from its chunks, and a
	// 64 KiB one was a large, zeroed allocation on every streamed serve.
	return &eventReader{br: bufio.NewReaderSize(r, 4<<10), max: max}
}

// next returns the next event's field ("data" or "error") and payload, or
// io.EOF at a clean end between events.
func (r *eventReader) next() (string, []byte, error) {
	var (
		field string
		data  []byte
		has   bool
	)
	for {
		line, err := r.line()
		if errors.Is(err, io.EOF) {
			if has || len(line) > 0 {
				return "", nil, fmt.Errorf("%w: stream: it ended inside an event", ErrBadResponse)
			}
			return "", nil, io.EOF
		}
		if err != nil {
			return "", nil, err
		}
		if len(line) == 0 {
			if has {
				return field, data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data", "error":
			if has && field != string(name) {
				return "", nil, fmt.Errorf("%w: stream: an event mixes data and error lines", ErrBadResponse)
			}
			if has {
				data = append(data, '\n')
			}
			data = append(data, value...)
			if len(data) > r.max {
				return "", nil, fmt.Errorf("%w: stream: an event exceeds %d bytes", ErrBadResponse, r.max)
			}
			field, has = string(name), true
		case "event", "id", "retry":
		default:
			const show = 80
			if len(line) > show {
				line = line[:show]
			}
			return "", nil, fmt.Errorf("%w: stream: unexpected line %q", ErrBadResponse, line)
		}
	}
}

// line reads one line without its ending. At the end of the stream it
// returns what it read with io.EOF.
func (r *eventReader) line() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(line)+len(chunk) > r.max+len("data: \r\n") {
			return nil, fmt.Errorf("%w: stream: an event exceeds %d bytes", ErrBadResponse, r.max)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return line, err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, nil
	}
}
