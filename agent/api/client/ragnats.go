package client

// RAG over NATS: providers announce their corpora as NATS micro services
// (agent/api's AnnounceRAG, names in rag/announce), Discover finds them, and NewRAGOverNATS calls
// one of them with the same procedures, replies and bindings as over HTTP.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"meshd/rag/announce"
	"meshd/steward"
)

// Provider is one node that announced a corpus. Steward and CorpusHash are
// what the announcement says: a hint to choose by, never evidence. The
// replies' binding (under a key the caller pinned) and describe_corpus
// (whose hash the caller recomputes) are the evidence.
type Provider struct {
	Steward    ed25519.PublicKey
	Org, Name  string
	CorpusHash string
	Model      string
	Dim        int
	Subject    string
}

// StewardID is the steward key in hex.
func (p Provider) StewardID() string { return fmt.Sprintf("%x", []byte(p.Steward)) }

// Discover asks every meshd on nc for its announced corpora ($SRV.INFO of
// the meshd-rag service) and returns those that match (nil matches all;
// ForCorpus matches one corpus), ordered by steward key then corpus. It
// returns once want matching providers have answered (want > 0) or when
// ctx ends, whichever is first: a scatter-gather has no last answer, so
// the caller's deadline is the wait. Announcements that do not parse are
// skipped.
func Discover(ctx context.Context, nc *nats.Conn, match func(Provider) bool, want int) ([]Provider, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO."+announce.ServiceName, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	var out []Provider
	seen := map[string]bool{}
	for want <= 0 || len(out) < want {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return nil, fmt.Errorf("discover: %w", err)
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil || info.Name != announce.ServiceName {
			continue
		}
		key, err := steward.ParsePublicKey(info.Metadata["steward"])
		if err != nil {
			continue
		}
		for _, ep := range info.Endpoints {
			ref := ep.Metadata["corpus"]
			org, name, err := CorpusRef(ref)
			if err != nil || ep.Subject != announce.Subject(info.Metadata["steward"], org, name) || seen[ep.Subject] {
				continue
			}
			dim, _ := strconv.Atoi(ep.Metadata["dim"])
			p := Provider{Steward: key, Org: org, Name: name, CorpusHash: ep.Metadata["corpus_hash"],
				Model: ep.Metadata["model"], Dim: dim, Subject: ep.Subject}
			if match != nil && !match(p) {
				continue
			}
			seen[ep.Subject] = true
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].StewardID(), out[j].StewardID(); a != b {
			return a < b
		}
		return out[i].Org+"/"+out[i].Name < out[j].Org+"/"+out[j].Name
	})
	return out, nil
}

// ForCorpus matches the providers of corpus "org/name".
func ForCorpus(corpus string) func(Provider) bool {
	return func(p Provider) bool { return p.Org+"/"+p.Name == corpus }
}

// NewRAGOverNATS is a client for the RAG procedures of one provider's
// corpus over nc. Its replies are checked under the key pinned with
// Trust, by default the provider's announced key (which says only that the
// reply came from the node that announced it: pin a key known beforehand
// for check 1). Only the RAG procedures work on it, and only on p's corpus.
func NewRAGOverNATS(nc *nats.Conn, p Provider) *Client {
	c := &Client{steward: p.Steward}
	c.ragVia = func(ctx context.Context, org, name, proc string, body []byte) ([]byte, http.Header, error) {
		if org != p.Org || name != p.Name {
			return nil, nil, fmt.Errorf("meshd over nats: this client calls %s/%s, not %s/%s", p.Org, p.Name, org, name)
		}
		msg := nats.NewMsg(p.Subject)
		msg.Data = body
		msg.Header.Set("Content-Type", "application/cbor")
		msg.Header.Set(announce.ProcedureHeader, proc)
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return nil, nil, fmt.Errorf("meshd over nats: %s: no provider answers on %s (it left or never announced): %w", proc, p.Subject, err)
			}
			return nil, nil, fmt.Errorf("meshd over nats: %s: %w", proc, err)
		}
		status, err := strconv.Atoi(reply.Header.Get(announce.StatusHeader))
		if err != nil {
			return nil, nil, fmt.Errorf("meshd over nats: %s: the reply has no %s", proc, announce.StatusHeader)
		}
		ct, _, _ := mime.ParseMediaType(reply.Header.Get("Content-Type"))
		if status/100 != 2 {
			return nil, nil, ragError(status, ct, reply.Data)
		}
		if ct != "application/cbor" || status != http.StatusOK {
			return nil, nil, fmt.Errorf("meshd over nats: %s: a CBOR request was answered %d %q, not 200 application/cbor", proc, status, ct)
		}
		if len(reply.Data) > ragMaxReply {
			return nil, nil, fmt.Errorf("meshd over nats: %s: the reply is larger than %d bytes", proc, ragMaxReply)
		}
		h := http.Header{}
		for k, v := range reply.Header {
			h[http.CanonicalHeaderKey(k)] = v
		}
		return reply.Data, h, nil
	}
	return c
}

// ParseStewardHex reads a 64-hex steward key, for pinning.
func ParseStewardHex(s string) (ed25519.PublicKey, error) {
	return steward.ParsePublicKey(strings.TrimSpace(s))
}
