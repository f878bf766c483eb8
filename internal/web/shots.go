package web

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// The computer tool's results carry their screenshot inline, base64 in
// value.image. The session page shows it as a thumbnail that links to the
// full image, both served from the event by shotImage, and leaves the
// base64 out of the page: a transcript of many screenshots would
// otherwise weigh megabytes, each image twice (value and raw JSON).

// shotOf returns the inline image of a computer result, or nil.
func shotOf(ev *api.Event) *api.ComputerImage {
	if ev.Type != api.EventResult || ev.Tool != api.ToolComputer || len(ev.Value) == 0 {
		return nil
	}
	var v struct {
		Image *api.ComputerImage `json:"image"`
	}
	if json.Unmarshal(ev.Value, &v) != nil || v.Image == nil || v.Image.Data == "" {
		return nil
	}
	return v.Image
}

// shotMedia is how the page shows the screenshot of a computer result.
func shotMedia(ev *api.Event, img *api.ComputerImage) *media {
	if ev.SessionID == "" || ev.Seq <= 0 {
		return nil
	}
	return &media{Name: "screenshot of call " + strconv.FormatInt(ev.CallSeq, 10), ContentType: img.MediaType, Image: true, Shot: true,
		URL: fmt.Sprintf("/ui/sessions/%s/events/%d/image", url.PathEscape(ev.SessionID), ev.Seq)}
}

// elidedImage stands for the base64 left out of the page.
const elidedImage = "(the image, shown above)"

// withoutImage returns a copy of a computer result whose value.image.data
// is replaced by a note, for the page's raw JSON.
func withoutImage(ev *api.Event) *api.Event {
	var v map[string]json.RawMessage
	if json.Unmarshal(ev.Value, &v) != nil {
		return ev
	}
	var img map[string]json.RawMessage
	if json.Unmarshal(v["image"], &img) != nil {
		return ev
	}
	img["data"], _ = json.Marshal(elidedImage)
	v["image"], _ = json.Marshal(img)
	b, err := json.Marshal(v)
	if err != nil {
		return ev
	}
	c := *ev
	c.Value = b
	return &c
}

// shotImage serves the screenshot of a computer result, decoded from the
// event with sequence number {seq}.
func (h *Handler) shotImage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		h.fail(w, r, http.StatusNotFound, "There is no such event: its number must be a positive integer.")
		return
	}
	var list api.EventList
	if err := h.call(r, "GET", fmt.Sprintf("/v1/sessions/%s/events?after=%d&limit=1", url.PathEscape(id), seq-1), nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	var img *api.ComputerImage
	if len(list.Items) == 1 && list.Items[0].Seq == seq {
		img = shotOf(&list.Items[0])
	}
	if img == nil {
		h.fail(w, r, http.StatusNotFound, "That event of the session holds no screenshot.")
		return
	}
	ct := strings.ToLower(img.MediaType)
	if ct != "image/png" && ct != "image/jpeg" && ct != "image/webp" {
		h.fail(w, r, http.StatusNotFound, "That screenshot is of a type the page does not show.")
		return
	}
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, "That screenshot is not valid base64.")
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// An event never changes, but the page is a signed-in user's.
	w.Header().Set("Cache-Control", "private, max-age=86400, immutable")
	_, _ = w.Write(b)
}
