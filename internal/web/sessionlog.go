package web

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/logtext"
)

// sessionLog sends a session's whole transcript as plain text, the way
// `outpost sessions logs` prints it (times in UTC), as a file to save: a
// log archive that reads without the page. The transcript is read a page
// at a time, so a long one is never held whole.
func (h *Handler) sessionLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	base := "/v1/sessions/" + url.PathEscape(id) + "/events"
	var list api.EventList
	if err := h.call(r, "GET", fmt.Sprintf("%s?after=0&limit=%d", base, transcriptPage), nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="outpost-%s.log"`, safeFileName(id)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	p := logtext.NewPrinter(w, time.UTC)
	for {
		for _, ev := range list.Items {
			if err := p.Print(ev); err != nil {
				return // the reader went away
			}
		}
		if !list.HasNextPage || len(list.Items) == 0 {
			return
		}
		after := list.Items[len(list.Items)-1].Seq
		list = api.EventList{}
		if err := h.call(r, "GET", fmt.Sprintf("%s?after=%d&limit=%d", base, after, transcriptPage), nil, &list); err != nil {
			// The status is sent; say in the file that it stops short.
			_ = p.Line(fmt.Sprintf("[the log stops here: reading the events after %d failed: %s]", after, errText(err)))
			return
		}
	}
}

// safeFileName keeps the letters, digits, '-' and '_' of s, for a
// Content-Disposition file name.
func safeFileName(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b = append(b, c)
		}
	}
	return string(b)
}
