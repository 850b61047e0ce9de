package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sender is the publisher's own JetStream publish path: messages go out
// on the core connection with a reply subject under one inbox, and the
// stream's acknowledgements come back on a channel the publisher's
// goroutine reads itself. The JetStream client's asynchronous publish
// spent, per message, a future with its channels, a trip through the
// reply subscription's goroutine and a JSON decode into a fresh struct;
// with serves a millisecond apart that was most of the publisher's CPU.
//
// A sender is used by one goroutine at a time.
type sender struct {
	nc *nats.Conn
	// prefix is the inbox the replies come to, ending in '.': each
	// message's reply subject is prefix plus its token.
	prefix string
	sub    *nats.Subscription
	acks   chan *nats.Msg
	// down reports the connection being lost: an acknowledgement owed
	// on the old connection never comes, and waiting for it would hold
	// the batch up to the timeout.
	down    chan nats.Status
	timeout time.Duration
	timer   *time.Timer

	// token is the next message's token. Tokens only grow, so an
	// acknowledgement for a message of an earlier, abandoned wait (a
	// timeout, a lost connection) is recognised and ignored.
	token uint64
	msg   nats.Msg // reused: PublishMsg copies it into the write buffer
	done  []bool
}

// newSender subscribes to a fresh inbox on nc for the acknowledgements of
// up to maxInFlight messages at a time.
func newSender(nc *nats.Conn, maxInFlight int, timeout time.Duration) (*sender, error) {
	s := &sender{
		nc:     nc,
		prefix: nc.NewInbox() + ".",
		// Room for one wait's acknowledgements and those still due
		// from one abandoned before it: the client drops a reply that
		// finds the channel full (as a slow consumer), which costs a
		// timeout and a republish, never a receipt.
		acks:    make(chan *nats.Msg, 2*maxInFlight+16),
		timeout: timeout,
		timer:   time.NewTimer(time.Hour),
		msg:     nats.Msg{Header: nats.Header{}},
	}
	s.timer.Stop()
	sub, err := nc.ChanSubscribe(s.prefix+"*", s.acks)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the acknowledgement inbox: %w", err)
	}
	s.sub = sub
	s.down = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	return s, nil
}

func (s *sender) close() {
	s.nc.RemoveStatusListener(s.down)
	s.sub.Unsubscribe()
	s.timer.Stop()
}

// send publishes n messages, the i-th filled in by fill (on a message
// reused between calls, its headers included), and waits for the
// stream's acknowledgements. It returns how many, from the first, were
// acknowledged in an unbroken run (a duplicate counts: the stream has the
// message), and when that is fewer than n, the index of the first message
// not acknowledged and why.
func (s *sender) send(ctx context.Context, n int, fill func(i int, m *nats.Msg)) (acked, failed int, err error) {
	// A loss of connection reported before this batch concerns acks
	// nobody waits for any more.
	for len(s.down) > 0 {
		<-s.down
	}
	base := s.token
	sent := 0
	var sendErr error
	for i := range n {
		fill(i, &s.msg)
		s.msg.Reply = s.prefix + strconv.FormatUint(base+uint64(i), 10)
		if sendErr = s.nc.PublishMsg(&s.msg); sendErr != nil {
			break
		}
		sent++
	}
	s.token += uint64(n)
	acked, failed, err = s.await(ctx, base, sent)
	if err == nil && sent < n {
		return acked, sent, sendErr
	}
	return acked, failed, err
}

// await collects the acknowledgements of the n messages from token base
// on, in whatever order they come, until the unbroken run from the first
// is decided: every message acknowledged, or every one before the first
// refused.
func (s *sender) await(ctx context.Context, base uint64, n int) (acked, failed int, err error) {
	if n == 0 {
		return 0, 0, nil
	}
	if cap(s.done) < n {
		s.done = make([]bool, n)
	}
	done := s.done[:n]
	clear(done)
	// stop is the first refused message, n while none is.
	stop := n
	s.timer.Reset(s.timeout)
	defer s.timer.Stop()
	for acked < stop {
		select {
		case m := <-s.acks:
			i, ok := s.index(m.Subject, base, n)
			if !ok || done[i] {
				continue // an earlier wait's, or not ours
			}
			done[i] = true
			if aerr := ackResult(m); aerr != nil && i < stop {
				stop, err = i, aerr
			}
			for acked < stop && done[acked] {
				acked++
			}
		case st := <-s.down:
			return acked, acked, fmt.Errorf("no acknowledgement: connection %s: %w", strings.ToLower(st.String()), nats.ErrDisconnected)
		case <-s.timer.C:
			return acked, acked, fmt.Errorf("no acknowledgement within %v", s.timeout)
		case <-ctx.Done():
			return acked, acked, ctx.Err()
		}
	}
	return acked, stop, err
}

// index is the position in the wait from token base of n messages of the
// message a reply subject answers.
func (s *sender) index(subject string, base uint64, n int) (int, bool) {
	tok, ok := strings.CutPrefix(subject, s.prefix)
	if !ok {
		return 0, false
	}
	t, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || t < base || t-base >= uint64(n) {
		return 0, false
	}
	return int(t - base), true
}

// ackResult is nil when m acknowledges a message as stored, and otherwise
// what it says went wrong.
func ackResult(m *nats.Msg) error {
	if len(m.Data) == 0 && m.Header != nil {
		// A status reply from the server, not from a stream: nothing
		// listens on the subject (no stream captures it).
		if st := m.Header.Get("Status"); st == "503" {
			return jetstream.ErrNoStreamResponse
		} else if st != "" {
			return fmt.Errorf("server status %s %s instead of an acknowledgement", st, m.Header.Get("Description"))
		}
	}
	_, err := parsePubAck(m.Data)
	return err
}

// pubAck is what a stream's acknowledgement says.
type pubAck struct {
	Stream    string
	Seq       uint64
	Duplicate bool
}

// AckError is a stream's refusal of a message, as its acknowledgement
// states it.
type AckError struct {
	// Code is the HTTP-like status (400, 503, ...), ErrCode the
	// server's error code (10060: wrong stream, ...).
	Code        int
	ErrCode     uint64
	Description string
}

func (e *AckError) Error() string {
	return fmt.Sprintf("stream refused the message: %s (status %d, error code %d)", e.Description, e.Code, e.ErrCode)
}

// errBadAck marks an acknowledgement that could not be read.
var errBadAck = errors.New("malformed acknowledgement")

// maxAckQuote bounds how much of an unreadable acknowledgement an error
// quotes.
const maxAckQuote = 200

func badAck(data []byte, why string) error {
	q := data
	if len(q) > maxAckQuote {
		q = q[:maxAckQuote]
	}
	return fmt.Errorf("%w (%s): %q", errBadAck, why, q)
}

// parsePubAck reads a JetStream acknowledgement: {"stream":S,"seq":N}
// with "duplicate":true when the message id was seen before, or
// {"error":{"code":C,"err_code":E,"description":D}}. An acknowledgement
// must name its stream and sequence, or be an error; anything else, or
// anything that is not JSON, is an error quoting it. Members other than
// these (the server adds some: "domain", "val", "batch", "count") are
// skipped, so that a server that adds another does not stop every board
// publishing. It allocates only for escaped strings and errors.
func parsePubAck(data []byte) (pubAck, error) {
	var a pubAck
	p := ackParser{b: data}
	var haveStream, haveSeq bool
	var ackErr *AckError
	err := p.object(func(key []byte) error {
		switch string(key) {
		case "stream":
			s, err := p.str()
			a.Stream, haveStream = s, true
			return err
		case "seq":
			n, err := p.uint()
			a.Seq, haveSeq = n, true
			return err
		case "duplicate":
			b, err := p.bool()
			a.Duplicate = b
			return err
		case "error":
			ackErr = &AckError{}
			return p.object(func(key []byte) error {
				switch string(key) {
				case "code":
					n, err := p.uint()
					ackErr.Code = int(min(n, 1<<31-1))
					return err
				case "err_code":
					n, err := p.uint()
					ackErr.ErrCode = n
					return err
				case "description":
					s, err := p.str()
					ackErr.Description = s
					return err
				}
				return p.skip(0)
			})
		}
		return p.skip(0)
	})
	if err == nil {
		p.space()
		if p.i != len(p.b) {
			err = errors.New("data after the object")
		}
	}
	switch {
	case err != nil:
		return pubAck{}, badAck(data, err.Error())
	case ackErr != nil:
		if ackErr.Code == 0 && ackErr.Description == "" {
			return pubAck{}, badAck(data, "error without code or description")
		}
		return pubAck{}, ackErr
	case !haveStream || a.Stream == "":
		return pubAck{}, badAck(data, "no stream")
	case !haveSeq:
		return pubAck{}, badAck(data, "no sequence")
	}
	return a, nil
}

// ackParser reads the JSON of an acknowledgement.
type ackParser struct {
	b []byte
	i int
}

// maxAckDepth bounds the nesting of skipped values.
const maxAckDepth = 16

func (p *ackParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

func (p *ackParser) expect(c byte) error {
	p.space()
	if p.i >= len(p.b) {
		return fmt.Errorf("ends where %q was expected", c)
	}
	if p.b[p.i] != c {
		return fmt.Errorf("%q at byte %d where %q was expected", p.b[p.i], p.i, c)
	}
	p.i++
	return nil
}

// object reads an object, calling member with each key to read its
// value. A key seen twice is refused: which of the two counts would be a
// guess.
func (p *ackParser) object(member func(key []byte) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	var seen [8][]byte
	nseen := 0
	for {
		key, err := p.rawStr()
		if err != nil {
			return err
		}
		for _, k := range seen[:nseen] {
			if string(k) == string(key) {
				return fmt.Errorf("member %q twice", key)
			}
		}
		if nseen < len(seen) {
			seen[nseen] = key
			nseen++
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return fmt.Errorf("member %q: %w", key, err)
		}
		p.space()
		if p.i >= len(p.b) {
			return errors.New("object not closed")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return fmt.Errorf("%q at byte %d where ',' or '}' was expected", p.b[p.i], p.i)
		}
	}
}

// rawStr reads a string and returns its bytes between the quotes, escapes
// left as they are.
func (p *ackParser) rawStr() ([]byte, error) {
	if err := p.expect('"'); err != nil {
		return nil, err
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], nil
		case c == '\\':
			p.i += 2
		case c < 0x20:
			return nil, fmt.Errorf("control character in a string at byte %d", p.i)
		default:
			p.i++
		}
	}
	return nil, errors.New("string not closed")
}

// str reads a string value.
func (p *ackParser) str() (string, error) {
	start := p.i
	raw, err := p.rawStr()
	if err != nil {
		return "", err
	}
	for _, c := range raw {
		if c == '\\' {
			// Rare in an acknowledgement: the standard decoder knows
			// every escape and checks each.
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", err
			}
			return s, nil
		}
	}
	return string(raw), nil
}

// uint reads a non-negative integer.
func (p *ackParser) uint() (uint64, error) {
	p.space()
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == start {
		return 0, fmt.Errorf("not a non-negative integer at byte %d", start)
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, fmt.Errorf("not an integer at byte %d", start)
		}
	}
	digits := p.b[start:p.i]
	if len(digits) > 1 && digits[0] == '0' {
		return 0, fmt.Errorf("leading zero at byte %d", start)
	}
	var n uint64
	for _, d := range digits {
		if n > (1<<64-1-uint64(d-'0'))/10 {
			return 0, fmt.Errorf("integer at byte %d out of range", start)
		}
		n = n*10 + uint64(d-'0')
	}
	return n, nil
}

func (p *ackParser) bool() (bool, error) {
	p.space()
	switch {
	case p.lit("true"):
		return true, nil
	case p.lit("false"):
		return false, nil
	}
	return false, fmt.Errorf("not true or false at byte %d", p.i)
}

// lit consumes word if it comes next.
func (p *ackParser) lit(word string) bool {
	if len(p.b)-p.i >= len(word) && string(p.b[p.i:p.i+len(word)]) == word {
		p.i += len(word)
		return true
	}
	return false
}

// skip reads a value of any kind and drops it.
func (p *ackParser) skip(depth int) error {
	if depth > maxAckDepth {
		return errors.New("nested too deep")
	}
	p.space()
	if p.i >= len(p.b) {
		return errors.New("ends where a value was expected")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{':
		return p.object(func([]byte) error { return p.skip(depth + 1) })
	case c == '[':
		p.i++
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			p.space()
			if p.i >= len(p.b) {
				return errors.New("array not closed")
			}
			switch p.b[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return nil
			default:
				return fmt.Errorf("%q at byte %d where ',' or ']' was expected", p.b[p.i], p.i)
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		p.i++
		for p.i < len(p.b) && strings.IndexByte("0123456789.eE+-", p.b[p.i]) >= 0 {
			p.i++
		}
		if !json.Valid(p.b[start:p.i]) {
			return fmt.Errorf("not a number at byte %d", start)
		}
		return nil
	case p.lit("true"), p.lit("false"), p.lit("null"):
		return nil
	}
	return fmt.Errorf("%q at byte %d where a value was expected", p.b[p.i], p.i)
}
