package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"meshd/rag/announce"
	"meshd/rag/binding"
)

// The corpora a node serves are announced on NATS as one micro service per
// node (PROFILE §18, "Discovery over NATS", names in rag/announce): the
// node's steward key in its metadata, one endpoint per corpus whose
// metadata names the corpus and its hash. A request on a corpus's subject
// is the same procedure call as over HTTP — the body, its Content-Type,
// the procedure in announce.ProcedureHeader — and gets the same reply,
// bound the same way (binding.Header), its status in announce.StatusHeader.

// ragNATSInFlight bounds the requests a node works on at once from NATS;
// past it a request is answered 503 at once. answer_query is bounded
// again by the serving slots, like an HTTP answer.
const ragNATSInFlight = 64

// ragNATSHeadroom is what a reply's headers may take beside its body
// within the server's max_payload (the binding is about 300 bytes).
const ragNATSHeadroom = 4096

// RAGAnnouncer is the node's micro service on one NATS connection.
type RAGAnnouncer struct {
	s   *Server
	nc  *nats.Conn
	sem chan struct{}

	mu  sync.Mutex
	svc micro.Service
}

// AnnounceRAG announces the node's corpora on nc and answers their
// procedures. Call Refresh after the node reloads (corpora and their
// hashes may have changed) and Stop before closing nc. Who may call is
// the NATS server's to decide (subject permissions): the service trusts
// whatever reaches its subjects as the HTTP API trusts a caller with the
// serve role.
func (s *Server) AnnounceRAG(nc *nats.Conn) (*RAGAnnouncer, error) {
	a := &RAGAnnouncer{s: s, nc: nc, sem: make(chan struct{}, ragNATSInFlight)}
	if err := a.Refresh(); err != nil {
		return nil, err
	}
	return a, nil
}

// Refresh replaces the announcement with one of the corpora served now;
// while connected, it returns once the server has it.
func (a *RAGAnnouncer) Refresh() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svc != nil {
		if err := a.svc.Stop(); err != nil {
			return fmt.Errorf("rag over nats: stopping the old announcement: %w", err)
		}
		a.svc = nil
	}
	key := a.s.node.Key.ID()
	svc, err := micro.AddService(a.nc, micro.Config{
		Name: announce.ServiceName, Version: announce.ServiceVersion,
		Description: "RAG service contract procedures of one meshd; replies bound to the steward key",
		Metadata:    map[string]string{"steward": key},
	})
	if err != nil {
		return fmt.Errorf("rag over nats: %w", err)
	}
	for _, p := range a.s.node.Providers() {
		d := p.Description()
		org, name := p.Org, p.Name
		err := svc.AddEndpoint(announce.EndpointName(org, name), micro.HandlerFunc(func(r micro.Request) { a.handle(org, name, r) }),
			micro.WithEndpointSubject(announce.Subject(key, org, name)),
			micro.WithEndpointQueueGroupDisabled(),
			micro.WithEndpointMetadata(map[string]string{"corpus": org + "/" + name, "corpus_hash": d.CorpusHash,
				"model": d.Model, "dim": strconv.Itoa(d.Dim)}))
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("rag over nats: corpus %s/%s: %w", org, name, err)
		}
	}
	a.svc = svc
	// Once the server has the subscriptions, a discovery that follows
	// finds them: a PING after the SUBs comes back after them. Not
	// connected yet, the announcement goes out on connect.
	if a.nc.IsConnected() {
		if err := a.nc.FlushTimeout(5 * time.Second); err != nil {
			a.s.log.Warn("rag over nats: the announcement is not confirmed", "err", err)
		}
	}
	return nil
}

// Stop withdraws the announcement.
func (a *RAGAnnouncer) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svc == nil {
		return nil
	}
	err := a.svc.Stop()
	a.svc = nil
	return err
}

// handle answers one request off the subscription's goroutine, so that a
// long answer does not hold up the corpus's other callers.
func (a *RAGAnnouncer) handle(org, name string, r micro.Request) {
	select {
	case a.sem <- struct{}{}:
	default:
		_ = r.Respond(nil, micro.WithHeaders(micro.Headers{announce.StatusHeader: {strconv.Itoa(http.StatusServiceUnavailable)}}))
		return
	}
	go func() {
		defer func() { <-a.sem }()
		a.serve(org, name, r)
	}()
}

// serve runs the procedure through the HTTP handler itself, so that both
// transports answer, refuse, meter and bind alike.
func (a *RAGAnnouncer) serve(org, name string, r micro.Request) {
	proc := r.Headers().Get(announce.ProcedureHeader)
	ctx, cancel := context.WithTimeout(context.Background(), a.s.opts.ServeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/rag/"+org+"/"+name+"/"+proc, bytes.NewReader(r.Data()))
	if err != nil {
		_ = r.Respond(nil, micro.WithHeaders(micro.Headers{announce.StatusHeader: {strconv.Itoa(http.StatusBadRequest)}}))
		return
	}
	req.Header.Set("Content-Type", r.Headers().Get("Content-Type"))
	req.SetPathValue("org", org)
	req.SetPathValue("name", name)
	req.SetPathValue("procedure", proc)
	rec := &ragRecorder{h: http.Header{}}
	req.Body = http.MaxBytesReader(rec, req.Body, a.s.opts.MaxBodyBytes)
	a.s.rag(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if max := a.nc.MaxPayload(); int64(rec.body.Len())+ragNATSHeadroom > max {
		// A whole document can outgrow the server's message limit: say so
		// rather than let the caller wait for a reply that cannot come.
		msg, _ := json.Marshal(map[string]string{"error": "reply_too_large",
			"message": fmt.Sprintf("the reply of %d bytes does not fit the NATS server's max_payload of %d; call this procedure over HTTP", rec.body.Len(), max)})
		_ = r.Respond(msg, micro.WithHeaders(micro.Headers{announce.StatusHeader: {strconv.Itoa(http.StatusRequestEntityTooLarge)}, "Content-Type": {"application/json"}}))
		return
	}
	h := micro.Headers{announce.StatusHeader: {strconv.Itoa(rec.status)}}
	for _, k := range []string{"Content-Type", binding.Header, "Mesh-Receipt-Id", "Mesh-Receipt-Seq", "Retry-After"} {
		if v := rec.h.Get(k); v != "" {
			h[k] = []string{v}
		}
	}
	if err := r.Respond(rec.body.Bytes(), micro.WithHeaders(h)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		a.s.log.Warn("rag over nats: the reply was not sent", "corpus", org+"/"+name, "procedure", proc, "err", err)
	}
}

// ragRecorder collects one reply of the HTTP handler.
type ragRecorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *ragRecorder) Header() http.Header { return r.h }
func (r *ragRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *ragRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
