package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestSignature: the header is t and the HMAC of "t.body", as computed
// here independently; Verify accepts it and refuses another secret, a
// changed body and an old time.
func TestSignature(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796271318, 0)
	body := []byte(`{"id":"whd_1","event":"session.created"}`)
	h := Signature("whsec_x", at, body)
	m := hmac.New(sha256.New, []byte("whsec_x"))
	m.Write([]byte("1796271318." + string(body)))
	if want := "t=1796271318,v1=" + hex.EncodeToString(m.Sum(nil)); h != want {
		t.Fatalf("Signature = %s, want %s", h, want)
	}
	if err := Verify("whsec_x", h, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Errorf("Verify: %v", err)
	}
	for name, err := range map[string]error{
		"other secret": Verify("whsec_y", h, body, at, 0),
		"changed body": Verify("whsec_x", h, append(body, ' '), at, 0),
		"too old":      Verify("whsec_x", h, body, at.Add(time.Hour), 5*time.Minute),
		"no parts":     Verify("whsec_x", "garbage", body, at, 0),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

// TestBackoff: the first retry comes within 10 s; each doubles, less up
// to half of it, up to the cap.
func TestBackoff(t *testing.T) {
	t.Parallel()
	for range 200 {
		if d := Backoff(1, DefaultFirstRetry, DefaultMaxBackoff); d < 2500*time.Millisecond || d > 5*time.Second {
			t.Fatalf("first retry after %s", d)
		}
		if d := Backoff(4, DefaultFirstRetry, DefaultMaxBackoff); d < 20*time.Second || d > 40*time.Second {
			t.Fatalf("fourth retry after %s", d)
		}
		if d := Backoff(40, DefaultFirstRetry, DefaultMaxBackoff); d < 30*time.Minute || d > time.Hour {
			t.Fatalf("fortieth retry after %s", d)
		}
	}
}

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url      string
		internal bool
		bad      string
	}{
		{url: "https://hooks.example.com/x"},
		{url: "http://10.1.2.3:8080/x"},
		{url: "http://127.0.0.1:9/x", internal: true},
		{url: "http://127.0.0.1:9/x", bad: "loopback"},
		{url: "http://[::1]/x", bad: "loopback"},
		{url: "http://169.254.169.254/latest/meta-data", bad: "link-local"},
		{url: "http://0.0.0.0/", bad: "unspecified"},
		{url: "ftp://example.com/", bad: "http://"},
		{url: "https:///x", bad: "no host"},
		{url: "https://u:p@example.com/", bad: "user name"},
		{url: "", bad: "required"},
		{url: "https://example.com/" + strings.Repeat("a", MaxURLLength), bad: "longer"},
	} {
		err := ValidateURL(c.url, c.internal)
		if (err == nil) != (c.bad == "") || (err != nil && !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("ValidateURL(%q, %v) = %v, want %q", c.url, c.internal, err, c.bad)
		}
	}
}

// TestClientRefusesInternalAndRedirects: the delivery client refuses to
// dial loopback unless allowed, and does not follow redirects.
func TestClientRefusesInternalAndRedirects(t *testing.T) {
	t.Parallel()
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/go" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	resp, err := NewClient(time.Second, false).Post(srv.URL+"/go", "application/json", nil)
	if err == nil || !errors.Is(err, errInternal) {
		t.Errorf("guarded client reached loopback: %v", err)
		if resp != nil {
			resp.Body.Close()
		}
	}
	if hits != 0 {
		t.Errorf("the receiver got %d requests through the guard", hits)
	}
	resp, err = NewClient(time.Second, true).Post(srv.URL+"/go", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits != 1 {
		t.Errorf("redirect: status %d after %d requests, want 302 after 1", resp.StatusCode, hits)
	}
}

func TestValidateEvents(t *testing.T) {
	t.Parallel()
	got, err := ValidateEvents([]string{api.EventSessionEnded, api.EventSessionCreated, api.EventSessionEnded})
	if err != nil || strings.Join(got, ",") != "session.ended,session.created" {
		t.Errorf("ValidateEvents = %v, %v", got, err)
	}
	if _, err := ValidateEvents([]string{"session.exploded"}); err == nil {
		t.Error("an unknown event passed")
	}
	if _, err := ValidateEvents(nil); err == nil {
		t.Error("no events passed")
	}
}
