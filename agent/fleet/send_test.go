package fleet

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want pubAck
		// apiErr is the refusal expected; bad, a substring of the
		// malformed-acknowledgement error expected.
		apiErr *AckError
		bad    string
	}{
		{name: "stored", in: `{"stream":"MESH_RECEIPTS","seq":42}`, want: pubAck{Stream: "MESH_RECEIPTS", Seq: 42}},
		{name: "duplicate", in: `{"stream":"MESH_RECEIPTS","seq":7,"duplicate":true}`, want: pubAck{Stream: "MESH_RECEIPTS", Seq: 7, Duplicate: true}},
		{name: "duplicate false", in: `{"stream":"S","seq":7,"duplicate":false}`, want: pubAck{Stream: "S", Seq: 7}},
		{name: "spaces and domain", in: " {\n \"stream\" : \"S\" , \"domain\":\"hub\", \"seq\" : 18446744073709551615 }\r\n", want: pubAck{Stream: "S", Seq: 1<<64 - 1}},
		{name: "fields a newer server adds", in: `{"stream":"S","seq":3,"val":"12","batch":"b1","count":2,"x":[1,{"y":null},-2.5e3,true]}`, want: pubAck{Stream: "S", Seq: 3}},
		{name: "escaped stream", in: `{"stream":"S\u0041\"","seq":1}`, want: pubAck{Stream: `SA"`, Seq: 1}},
		{name: "seq zero", in: `{"stream":"S","seq":0}`, want: pubAck{Stream: "S"}},

		{name: "wrong stream", in: `{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`,
			apiErr: &AckError{Code: 400, ErrCode: 10060, Description: "expected stream does not match"}},
		{name: "error beside an ack", in: `{"stream":"S","seq":9,"error":{"code":503,"description":"store \"full\""}}`,
			apiErr: &AckError{Code: 503, Description: `store "full"`}},
		{name: "error with unknown member", in: `{"error":{"code":500,"err_code":1,"description":"d","more":{}}}`,
			apiErr: &AckError{Code: 500, ErrCode: 1, Description: "d"}},

		{name: "empty", in: ``, bad: "ends where '{' was expected"},
		{name: "not json", in: `+OK`, bad: `'+' at byte 0`},
		{name: "array", in: `[1]`, bad: `'[' at byte 0`},
		{name: "unclosed", in: `{"stream":"S","seq":1`, bad: "object not closed"},
		{name: "unclosed string", in: `{"stream":"S`, bad: "string not closed"},
		{name: "empty object", in: `{}`, bad: "no stream"},
		{name: "no seq", in: `{"stream":"S"}`, bad: "no sequence"},
		{name: "no stream", in: `{"seq":1}`, bad: "no stream"},
		{name: "empty stream", in: `{"stream":"","seq":1}`, bad: "no stream"},
		{name: "negative seq", in: `{"stream":"S","seq":-1}`, bad: "not a non-negative integer"},
		{name: "fractional seq", in: `{"stream":"S","seq":1.5}`, bad: "not an integer"},
		{name: "quoted seq", in: `{"stream":"S","seq":"1"}`, bad: "not a non-negative integer"},
		{name: "seq overflow", in: `{"stream":"S","seq":18446744073709551616}`, bad: "out of range"},
		{name: "leading zero", in: `{"stream":"S","seq":01}`, bad: "leading zero"},
		{name: "stream twice", in: `{"stream":"S","seq":1,"stream":"T"}`, bad: `member "stream" twice`},
		{name: "trailing data", in: `{"stream":"S","seq":1} {}`, bad: "data after the object"},
		{name: "bad duplicate", in: `{"stream":"S","seq":1,"duplicate":"yes"}`, bad: "not true or false"},
		{name: "bad skipped value", in: `{"stream":"S","seq":1,"x":nope}`, bad: `member "x"`},
		{name: "bad skipped number", in: `{"stream":"S","seq":1,"x":1.}`, bad: "not a number"},
		{name: "missing colon", in: `{"stream" "S","seq":1}`, bad: `where ':' was expected`},
		{name: "missing comma", in: `{"stream":"S" "seq":1}`, bad: "where ',' or '}' was expected"},
		{name: "control character", in: "{\"stream\":\"S\x01\",\"seq\":1}", bad: "control character"},
		{name: "bad escape", in: `{"stream":"S\q","seq":1}`, bad: `member "stream"`},
		{name: "empty error", in: `{"error":{}}`, bad: "error without code or description"},
		{name: "error not an object", in: `{"error":"boom"}`, bad: `member "error"`},
		{name: "deep unknown", in: `{"stream":"S","seq":1,"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, bad: "nested too deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parsePubAck([]byte(c.in))
			switch {
			case c.apiErr != nil:
				var ae *AckError
				if !errors.As(err, &ae) {
					t.Fatalf("parsePubAck(%q) = %+v, %v; want the refusal %+v", c.in, got, err, c.apiErr)
				}
				if *ae != *c.apiErr {
					t.Errorf("refusal %+v, want %+v", *ae, *c.apiErr)
				}
				if !strings.Contains(err.Error(), c.apiErr.Description) {
					t.Errorf("error %q does not carry the server's description", err)
				}
			case c.bad != "":
				if !errors.Is(err, errBadAck) {
					t.Fatalf("parsePubAck(%q) = %+v, %v; want a malformed-acknowledgement error", c.in, got, err)
				}
				if !strings.Contains(err.Error(), c.bad) {
					t.Errorf("error %q does not say %q", err, c.bad)
				}
				if q := strconv.Quote(c.in); len(c.in) < maxAckQuote && !strings.Contains(err.Error(), q) {
					t.Errorf("error %q does not quote the acknowledgement %s", err, q)
				}
			default:
				if err != nil {
					t.Fatalf("parsePubAck(%q): %v", c.in, err)
				}
				if got != c.want {
					t.Errorf("parsePubAck(%q) = %+v, want %+v", c.in, got, c.want)
				}
			}
		})
	}
}

func TestParsePubAckQuotesLongAcksInPart(t *testing.T) {
	in := `{"stream":"S","seq":x` + strings.Repeat(" ", 1000) + `}`
	_, err := parsePubAck([]byte(in))
	if !errors.Is(err, errBadAck) {
		t.Fatalf("got %v, want a malformed-acknowledgement error", err)
	}
	if !strings.Contains(err.Error(), strconv.Quote(in[:maxAckQuote])) || len(err.Error()) > 2*maxAckQuote {
		t.Errorf("error quotes %d bytes of a %d-byte acknowledgement, want the first %d: %q", len(err.Error()), len(in), maxAckQuote, err)
	}
}

// testSender is a sender with no connection: the test plays the server by
// putting replies on its channels.
func testSender(timeout time.Duration) *sender {
	s := &sender{
		prefix:  "_INBOX.test.",
		acks:    make(chan *nats.Msg, 64),
		down:    make(chan nats.Status, 1),
		timeout: timeout,
		timer:   time.NewTimer(time.Hour),
	}
	s.timer.Stop()
	return s
}

func TestSenderMatchesAcks(t *testing.T) {
	ok := func(tok uint64) *nats.Msg {
		return &nats.Msg{Subject: "_INBOX.test." + strconv.FormatUint(tok, 10), Data: []byte(`{"stream":"S","seq":` + strconv.FormatUint(tok, 10) + `}`)}
	}
	dup := func(tok uint64) *nats.Msg {
		m := ok(tok)
		m.Data = []byte(`{"stream":"S","seq":1,"duplicate":true}`)
		return m
	}
	refused := func(tok uint64, desc string) *nats.Msg {
		m := ok(tok)
		m.Data = []byte(`{"error":{"code":400,"err_code":10060,"description":"` + desc + `"}}`)
		return m
	}
	noResponders := func(tok uint64) *nats.Msg {
		m := ok(tok)
		m.Data, m.Header = nil, nats.Header{"Status": []string{"503"}}
		return m
	}
	garbage := func(tok uint64) *nats.Msg {
		m := ok(tok)
		m.Data = []byte("garbage")
		return m
	}
	foreign := func(subject string) *nats.Msg {
		return &nats.Msg{Subject: subject, Data: []byte(`{"error":{"code":500,"description":"not ours"}}`)}
	}
	const base, n = 100, 5
	cases := []struct {
		name    string
		replies []*nats.Msg
		down    bool
		// acked and failed are what await returns; err, a substring of
		// its error ("" for none).
		acked, failed int
		err           string
		is            error
	}{
		{name: "in order", replies: []*nats.Msg{ok(100), ok(101), ok(102), ok(103), ok(104)}, acked: 5, failed: 5},
		{name: "out of order", replies: []*nats.Msg{ok(104), ok(102), ok(100), ok(103), ok(101)}, acked: 5, failed: 5},
		{name: "duplicates count", replies: []*nats.Msg{dup(100), ok(101), dup(102), dup(103), ok(104)}, acked: 5, failed: 5},
		{name: "stale, repeated and foreign replies ignored",
			replies: []*nats.Msg{refused(99, "stale"), ok(100), refused(105, "later"), ok(100), foreign("_INBOX.other.101"), foreign("_INBOX.test.x"),
				foreign("_INBOX.test.101.1"), ok(101), ok(102), ok(103), ok(104)},
			acked: 5, failed: 5},
		{name: "a repeat cannot undo a refusal", replies: []*nats.Msg{ok(100), refused(101, "wrong stream"), ok(101), ok(102), ok(103), ok(104)},
			acked: 1, failed: 1, err: "wrong stream"},
		{name: "refused in the middle", replies: []*nats.Msg{ok(100), ok(101), refused(102, "wrong stream"), ok(103), ok(104)},
			acked: 2, failed: 2, err: "wrong stream"},
		{name: "the earliest refusal counts", replies: []*nats.Msg{refused(103, "third"), ok(100), refused(101, "first"), ok(102), ok(104)},
			acked: 1, failed: 1, err: "first"},
		{name: "refused first, decided at once", replies: []*nats.Msg{refused(100, "first")}, acked: 0, failed: 0, err: "first"},
		{name: "no stream", replies: []*nats.Msg{ok(100), noResponders(101)}, acked: 1, failed: 1, is: jetstream.ErrNoStreamResponse},
		{name: "garbage", replies: []*nats.Msg{ok(100), ok(101), ok(102), garbage(103)}, acked: 3, failed: 3, is: errBadAck, err: `"garbage"`},
		{name: "one missing", replies: []*nats.Msg{ok(100), ok(102), ok(103), ok(104)}, acked: 1, failed: 1, err: "no acknowledgement within"},
		{name: "connection lost", replies: []*nats.Msg{ok(100), ok(101)}, down: true, acked: 2, failed: 2, is: nats.ErrDisconnected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			timeout := time.Hour // never reached: the replies decide
			if strings.Contains(c.err, "within") {
				timeout = 50 * time.Millisecond
			}
			s := testSender(timeout)
			for _, m := range c.replies {
				s.acks <- m
			}
			if c.down {
				// After the replies that did come: await reads them
				// first only if it sees them first, so the loss is
				// reported once they are all taken.
				go func() {
					for len(s.acks) > 0 {
						time.Sleep(time.Millisecond)
					}
					s.down <- nats.RECONNECTING
				}()
			}
			acked, failed, err := s.await(context.Background(), base, n)
			if acked != c.acked || (err != nil && failed != c.failed) {
				t.Errorf("acked %d, failed at %d; want %d and %d (err %v)", acked, failed, c.acked, c.failed, err)
			}
			switch {
			case c.err == "" && c.is == nil:
				if err != nil {
					t.Errorf("err %v, want none", err)
				}
			default:
				if err == nil {
					t.Fatalf("no error, want %q %v", c.err, c.is)
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Errorf("err %q, want one saying %q", err, c.err)
				}
				if c.is != nil && !errors.Is(err, c.is) {
					t.Errorf("err %v is not %v", err, c.is)
				}
			}
		})
	}
}

func TestSenderStopsOnCancel(t *testing.T) {
	s := testSender(time.Hour)
	s.acks <- &nats.Msg{Subject: "_INBOX.test.0", Data: []byte(`{"stream":"S","seq":1}`)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	acked, _, err := s.await(ctx, 0, 2)
	if !errors.Is(err, context.Canceled) || acked > 1 {
		t.Errorf("acked %d, err %v; want at most 1 and context.Canceled", acked, err)
	}
}

// TestSenderAgainstServer sends through a real server: the stream's
// acknowledgements, its duplicate detection and its refusals come back
// to the right messages.
func TestSenderAgainstServer(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc, js := connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := EnsureStream(ctx, js, StreamConfig("", 0)); err != nil {
		t.Fatal(err)
	}
	s, err := newSender(nc, 8, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	k := newKey(t)
	envs := signChain(t, k, 8)
	subject := ReceiptSubject(k.ID())
	send := func(first int, n int, expect string) (int, int, error) {
		return s.send(ctx, n, func(i int, m *nats.Msg) {
			setMsg(m, subject, k.ID(), uint64(first+i), envs[first+i])
			setHeader(m.Header, jetstream.ExpectedStreamHeader, expect)
		})
	}
	stored := func() uint64 {
		st, err := js.Stream(ctx, DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}

	if acked, _, err := send(0, 6, DefaultStream); acked != 6 || err != nil {
		t.Fatalf("first batch: acked %d, err %v; want 6, none", acked, err)
	}
	// Receipts 2..7: four repeats (duplicates: acknowledged, not stored
	// again) and two new.
	if acked, _, err := send(2, 6, DefaultStream); acked != 6 || err != nil {
		t.Fatalf("overlapping batch: acked %d, err %v; want 6, none", acked, err)
	}
	if n := stored(); n != 8 {
		t.Errorf("stream holds %d messages, want 8 (repeats dropped as duplicates)", n)
	}
	// A stream other than the one expected: refused, nothing stored.
	acked, failed, err := send(0, 3, "ANOTHER")
	var ae *AckError
	if acked != 0 || failed != 0 || !errors.As(err, &ae) || ae.ErrCode != 10060 {
		t.Fatalf("wrong expected stream: acked %d, failed %d, err %v; want 0, 0 and a refusal with error code 10060", acked, failed, err)
	}
	// A subject no stream captures: no responders.
	acked, _, err = s.send(ctx, 1, func(_ int, m *nats.Msg) {
		setMsg(m, "mesh.elsewhere."+k.ID(), k.ID(), 0, envs[0])
	})
	if acked != 0 || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("subject without a stream: acked %d, err %v; want 0 and %v", acked, err, jetstream.ErrNoStreamResponse)
	}
	// The sender goes on working after refusals.
	if acked, _, err := send(7, 1, DefaultStream); acked != 1 || err != nil {
		t.Fatalf("after the refusals: acked %d, err %v; want 1, none", acked, err)
	}
	if n := stored(); n != 8 {
		t.Errorf("stream holds %d messages, want 8", n)
	}
}
