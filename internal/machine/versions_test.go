package machine

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestPrograms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    api.Capabilities
		want string
	}{
		{"debian", api.Capabilities{
			Git:           "git version 2.39.5",
			FFmpeg:        "ffmpeg version 5.1.6-0+deb12u1 Copyright (c) 2000-2024 the FFmpeg developers",
			ChromePath:    "/usr/bin/chromium",
			ChromeVersion: "Chromium 156.0.8078.114 built on Debian GNU/Linux 12 (bookworm)",
		}, "git 2.39.5, ffmpeg 5.1.6, chromium 156"},
		{"macOS", api.Capabilities{
			Git:           "git version 2.39.3 (Apple Git-146)",
			ChromePath:    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
			ChromeVersion: "Google Chrome 120.0.6099.109",
		}, "git 2.39.3, chrome 120"},
		{"browser without a version", api.Capabilities{ChromePath: "/opt/chromium/chrome-wrapper"}, "chromium"},
		{"ffmpeg from git", api.Capabilities{FFmpeg: "ffmpeg version N-113000-g1234abcd Copyright"}, "ffmpeg N-113000-g1234abcd"},
		{"nothing", api.Capabilities{}, ""},
	} {
		if got := strings.Join(Programs(tc.c), ", "); got != tc.want {
			t.Errorf("%s: Programs = %q, want %q", tc.name, got, tc.want)
		}
	}
}
