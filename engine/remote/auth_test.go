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
