package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/api"
)

// eventsAPI serves GET …/events?after&limit over the given sequence
// numbers, counting the reads.
type eventsAPI struct {
	seqs  []int64
	reads int
}

func (f *eventsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.reads++
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit < 1 || limit > 1000 {
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"error":{"code":"bad_request","message":"limit"}}`))
		return
	}
	i, _ := slices.BinarySearch(f.seqs, after+1)
	list := api.EventList{Items: []api.Event{}, Next: after}
	for ; i < len(f.seqs) && len(list.Items) <= limit; i++ {
		list.Items = append(list.Items, api.Event{Seq: f.seqs[i], Type: api.EventOutput})
	}
	if len(list.Items) > limit {
		list.Items, list.HasNextPage = list.Items[:limit], true
	}
	if n := len(list.Items); n > 0 {
		list.Next = list.Items[n-1].Seq
	}
	_ = json.NewEncoder(w).Encode(list)
}

func TestNewestEvents(t *testing.T) {
	t.Parallel()
	seqs := func(n int, every int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i+1) * every
		}
		return out
	}
	for _, tc := range []struct {
		name string
		seqs []int64
	}{
		{"none", nil}, {"one", seqs(1, 1)}, {"499", seqs(499, 1)}, {"500", seqs(500, 1)}, {"501", seqs(501, 1)},
		{"1000", seqs(1000, 1)}, {"1064", seqs(1064, 1)}, {"10000", seqs(10000, 1)}, {"12345", seqs(12345, 1)},
		{"100000", seqs(100000, 1)}, {"gaps", seqs(5000, 3)},
	} {
		f := &eventsAPI{seqs: tc.seqs}
		h := &Handler{api: f}
		r := httptest.NewRequest("GET", "/ui/sessions/s", nil)
		got, err := h.newestEvents(r, "/v1/sessions/s")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		n := len(tc.seqs)
		if n == 0 {
			if len(got) != 0 {
				t.Errorf("%s: %d events", tc.name, len(got))
			}
			continue
		}
		if len(got) == 0 || got[len(got)-1].Seq != tc.seqs[n-1] {
			t.Errorf("%s: does not end with the last event", tc.name)
			continue
		}
		// The window is the tail of the transcript, with nothing skipped.
		first := slices.Index(tc.seqs, got[0].Seq)
		if !slices.Equal(seqsOf(got), tc.seqs[first:]) || len(got) > transcriptPage {
			t.Errorf("%s: window of %d events from %d is not the tail", tc.name, len(got), got[0].Seq)
		}
		if tc.name != "gaps" && len(got) != min(n, transcriptPage) {
			t.Errorf("%s: %d events, want %d", tc.name, len(got), min(n, transcriptPage))
		}
		if n == 10000 && f.reads > 20 {
			t.Errorf("10000 events took %d reads, want O(log n)", f.reads)
		}
		t.Logf("%s: %d reads", tc.name, f.reads)
	}
}

func seqsOf(evs []api.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func TestMediaOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool, value string
		want        string // "image", "video" or ""
	}{
		{api.ToolBrowserScreenshot, `{"path":"/x/page.png","artifact":{"name":"page.png","content_type":"image/png"}}`, "image"},
		{api.ToolRecordStop, `{"artifact":{"name":"demo.mp4","content_type":"video/mp4"}}`, "video"},
		{api.ToolRecordStop, `{"artifact":{"name":"demo.webm","content_type":"video/webm; codecs=vp9"}}`, "video"},
		{api.ToolUploadArtifact, `{"name":"shot.jpg","content_type":"image/jpeg","size":3}`, "image"},
		{api.ToolExec, `{"name":"shot.jpg","content_type":"image/jpeg"}`, ""},
		{api.ToolBrowserScreenshot, `{"artifact_error":"too big"}`, ""},
		{api.ToolBrowserScreenshot, `{"artifact":{"name":"../etc/passwd","content_type":"image/png"}}`, ""},
		{api.ToolBrowserScreenshot, `{"artifact":{"name":"x.\"onerror=1","content_type":"image/png"}}`, ""},
		{api.ToolUploadArtifact, `{"name":"page.html","content_type":"text/html"}`, ""},
		{api.ToolUploadArtifact, `{"name":"a.avi","content_type":"video/x-msvideo"}`, ""},
		{api.ToolUploadArtifact, `not json`, ""},
	} {
		m := mediaOf("ses_1", tc.tool, json.RawMessage(tc.value))
		got := ""
		switch {
		case m != nil && m.Image:
			got = "image"
		case m != nil && m.Video:
			got = "video"
		}
		if got != tc.want {
			t.Errorf("mediaOf(%s, %s) = %q, want %q", tc.tool, tc.value, got, tc.want)
		}
		if m != nil && m.URL != "/ui/sessions/ses_1/artifacts/"+m.Name {
			t.Errorf("URL %q", m.URL)
		}
	}
}

func TestProgVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"git version 2.39.5": "2.39.5",
		"ffmpeg version 5.1.9-0+deb12u1 Copyright (c) 2000-2026 the FFmpeg developers": "5.1.9-0+deb12u1",
		"Chromium 156.0.8078.108 built on Debian GNU/Linux 12 (bookworm)":              "Chromium 156.0.8078.108",
		"": "no",
	} {
		if got := string(progVersion(in)); !strings.Contains(got, ">"+want+"<") {
			t.Errorf("progVersion(%q) = %s, want %s", in, got, want)
		}
	}
	if got := string(progVersion(`<script>x</script> version "><b>`)); strings.Contains(got, "<script>") || strings.Contains(got, "<b>") {
		t.Errorf("progVersion does not escape: %s", got)
	}
}

func TestPrettyJSONShowsHTMLCharacters(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"u":"a\u003cb\u003e\u0026c"}`: "{\n  \"u\": \"a<b>&c\"\n}",
		`{"u":"a\\u003cb"}`:             "{\n  \"u\": \"a\\\\u003cb\"\n}",
		`{"u":"a\\\u003cb"}`:            "{\n  \"u\": \"a\\\\<b\"\n}",
		`["\u003C"]`:                    "[\n  \"<\"\n]",
		`not json \u003c`:               `not json \u003c`,
	} {
		if got := prettyJSON(json.RawMessage(in)); got != want {
			t.Errorf("prettyJSON(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRepos(t *testing.T) {
	t.Parallel()
	got, err := parseRepos("https://x/a.git\n\n# skip\n  git@host:b.git  v1  bee \r\nfile:///c main\n")
	want := []api.Repo{{URL: "https://x/a.git"}, {URL: "git@host:b.git", Ref: "v1", Name: "bee"}, {URL: "file:///c", Ref: "main"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseRepos = %+v, %v", got, err)
	}
	if _, err := parseRepos("a b c d"); err == nil {
		t.Fatal("want an error for four fields")
	}
}
