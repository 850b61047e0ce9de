package remote_test

import (
	"crypto/sha256"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/agent/api"
	"meshd/auth"
)

// A node behind TLS and a token: the front door presents the token from
// its file and pins the node's certificate; without the token it is
// refused, with another pin it does not connect.
func TestForwardWithTokenAndPinnedTLS(t *testing.T) {
	up := startUpstream(t, 10)
	guarded := api.New(up.n, api.Options{Auth: auth.New(&auth.Policy{Tokens: []auth.Token{{Name: "front", SHA256: auth.HashToken("mshd_front"), Roles: auth.Roles(auth.Serve)}}})})
	hs := httptest.NewUnstartedServer(guarded)
	hs.Config.ConnContext = auth.ConnContext(auth.Public)
	hs.StartTLS()
	t.Cleanup(func() { guarded.Drain(); hs.Close() })
	pin := fmt.Sprintf("%x", sha256.Sum256(hs.Certificate().Raw))
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "front.token")
	if err := os.WriteFile(tokenFile, []byte("mshd_front\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	backend := func(extra string) string {
		return strings.Replace(remoteBackend("far", up, hs.URL, 10), "timeout = ", extra+"timeout = ", 1)
	}
	for _, tc := range []struct {
		name, extra, err string
	}{
		{"token and pin", fmt.Sprintf("token_file = %q\nserver_sha256 = %q\n", tokenFile, pin), ""},
		{"no token", fmt.Sprintf("server_sha256 = %q\n", pin), "HTTP 401 unauthenticated"},
		{"wrong pin", fmt.Sprintf("token_file = %q\nserver_sha256 = %q\n", tokenFile, strings.Repeat("0", 64)), "not the pinned one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front, _ := startNode(t, backend(tc.extra))
			resp, err := serve(t, front, "through the door")
			if tc.err == "" {
				if err != nil || resp.Sealed.Receipt.UpstreamReceipt == nil {
					t.Fatalf("forwarded serve: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want %q, got %v", tc.err, err)
			}
		})
	}
}

// The key check reads the node's chain head with the backend's own
// credentials: a token that may read lets it catch a wrong pin before the
// node is sent the serve (a pinned TLS certificate does not: it pins the
// node's transport, not its steward key); one that may only serve is
// refused the read (403), the key stays unknown, and the forwarded serve's
// receipt is what refuses the node.
func TestKeyCheckUsesTheBackendsCredentials(t *testing.T) {
	up := startUpstream(t, 10)
	if _, err := serve(t, up.n, "a receipt for the head"); err != nil {
		t.Fatal(err)
	}
	guarded := api.New(up.n, api.Options{Auth: auth.New(&auth.Policy{Tokens: []auth.Token{
		{Name: "serve", SHA256: auth.HashToken("mshd_serve"), Roles: auth.Roles(auth.Serve)},
		{Name: "serve-read", SHA256: auth.HashToken("mshd_serve_read"), Roles: auth.Roles(auth.Serve | auth.Read)},
	}})})
	hs := httptest.NewUnstartedServer(guarded)
	hs.Config.ConnContext = auth.ConnContext(auth.Public)
	hs.StartTLS()
	t.Cleanup(func() { guarded.Drain(); hs.Close() })
	pin := fmt.Sprintf("%x", sha256.Sum256(hs.Certificate().Raw))
	dir := t.TempDir()
	for _, tc := range []struct {
		name, token, key string
		err              string // "" for served
		served           bool   // the error says the node may have served
	}{
		{"read role, the right key", "mshd_serve_read", up.n.Key.ID(), "", false},
		{"read role, a wrong key", "mshd_serve_read", otherKey(t), "chain head (receipt 1) does not verify under its pinned steward key", false},
		{"serve role only, a wrong key", "mshd_serve", otherKey(t), "the node's receipt does not verify under its steward key", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokenFile := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".token")
			if err := os.WriteFile(tokenFile, []byte(tc.token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := strings.Replace(pinned("far", tc.key, hs.URL, 10), "timeout = ",
				fmt.Sprintf("token_file = %q\nserver_sha256 = %q\ntimeout = ", tokenFile, pin), 1)
			front, _ := startNode(t, cfg)
			before := up.n.Stores.Log.Durable()
			resp, err := serve(t, front, "through the door, "+tc.name)
			if tc.err == "" {
				if err != nil || resp.Sealed.Receipt.UpstreamReceipt == nil {
					t.Fatalf("forwarded serve: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "may have served it") != tc.served {
				t.Fatalf("want %q (may have served: %v), got %v", tc.err, tc.served, err)
			}
			if grew := up.n.Stores.Log.Durable() - before; grew != map[bool]uint64{false: 0, true: 1}[tc.served] {
				t.Fatalf("the node sealed %d receipts for it", grew)
			}
		})
	}
}
