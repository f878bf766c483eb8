package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostPageDesktop: the outpost page shows the outpost's desktop
// setting as the API has it.
func TestOutpostPageDesktop(t *testing.T) {
	t.Parallel()
	srv, tok := startUI(t)
	ctx := context.Background()
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "desk",
		Desktop: &api.OutpostDesktop{Enabled: true, Width: 1600, Height: 900}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	reader := newUIUser(t, srv, tok["reader"])
	for page, want := range map[string]string{
		"/ui/outposts/desk":  `id="outpost-desktop">every session gets one, 1600×900`,
		"/ui/outposts/plain": `id="outpost-desktop">not set: its machines decide`,
	} {
		if body := reader.page(page); !strings.Contains(body, want) {
			t.Errorf("%s lacks %q", page, want)
		}
	}
}
