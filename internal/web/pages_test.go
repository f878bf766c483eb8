package web

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

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
