package machine

import (
	"regexp"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// versionNumber is the first dotted number of a program's banner.
var versionNumber = regexp.MustCompile(`\d+(\.\d+)*`)

// Programs lists the optional programs Detect found, each with its short
// version as people read it: "git 2.39.5", "ffmpeg 5.1.6", "chromium 156"
// (a browser by its major version). A program whose banner holds no
// version is listed by name alone.
func Programs(c api.Capabilities) []string {
	var out []string
	if c.Git != "" {
		out = append(out, named("git", ShortVersion(c.Git)))
	}
	if c.FFmpeg != "" {
		out = append(out, named("ffmpeg", ShortVersion(c.FFmpeg)))
	}
	if c.ChromePath != "" || c.ChromeVersion != "" {
		out = append(out, named(browserName(c), majorVersion(ShortVersion(c.ChromeVersion))))
	}
	return out
}

// ShortVersion is the version number in a program's banner, without what
// follows it: "git version 2.39.5" and "ffmpeg version 5.1.6-0+deb12u1
// Copyright …" give "2.39.5" and "5.1.6"; "" when there is none.
func ShortVersion(banner string) string {
	// The word after "version" when the banner says so (a build from
	// source may have "N-113000-g1234abcd" there), else the first number.
	if i := strings.Index(strings.ToLower(banner), "version "); i >= 0 {
		if f := strings.Fields(banner[i+len("version "):]); len(f) > 0 {
			if v := versionNumber.FindString(f[0]); v != "" && strings.HasPrefix(f[0], v) {
				return v
			}
			return f[0]
		}
	}
	return versionNumber.FindString(banner)
}

func majorVersion(v string) string {
	major, _, _ := strings.Cut(v, ".")
	return major
}

// browserName is "chromium" or "chrome", from the browser's banner
// ("Chromium 156.0…", "Google Chrome 120.0…") or else its path.
func browserName(c api.Capabilities) string {
	s := strings.ToLower(c.ChromeVersion)
	if s == "" {
		s = strings.ToLower(c.ChromePath)
	}
	if strings.Contains(s, "chromium") {
		return "chromium"
	}
	return "chrome"
}

func named(name, version string) string {
	if version == "" {
		return name
	}
	return name + " " + version
}
