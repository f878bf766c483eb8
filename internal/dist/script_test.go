//go:build unix

package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDistScriptPublishesEveryPlatform runs scripts/dist.sh, as `make dist`
// does, and checks the directory it leaves: a binary, a check line and a
// latest pointer for each of the six platforms, under the names this
// package parses. The compiler is a stand-in that writes its target
// platform into the output file, because six real cross builds take minutes
// on a small machine; that each platform compiles is checked by `make cross`.
func TestDistScriptPublishesEveryPlatform(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	tmp := t.TempDir()
	fakeGo := filepath.Join(tmp, "go")
	script := "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nprintf 'build for %s/%s\\n' \"$GOOS\" \"$GOARCH\" >\"$out\"\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "dist")
	const id = "0123456789ab"
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "dist.sh"), dir)
	cmd.Env = append(os.Environ(), "GO="+fakeGo, "DIST_ID="+id, "VERSION=test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, out)
	}
	want := map[string]string{
		SuffixLinuxX64: "linux/amd64", SuffixLinuxArm64: "linux/arm64",
		SuffixMacOSArm64: "darwin/arm64", SuffixMacOSX64: "darwin/amd64",
		SuffixWindowsX64: "windows/amd64", SuffixWindowsArm64: "windows/arm64",
	}
	var wantNames []string
	for suffix, platform := range want {
		goos, goarch, _ := strings.Cut(platform, "/")
		if got := Suffix(goos, goarch); got != suffix {
			t.Errorf("Suffix(%s) = %q, want %q (the script and the package disagree)", platform, got, suffix)
		}
		wantNames = append(wantNames, LatestName(suffix), BinaryName(id, suffix), ChecksumName(id, suffix))
		bin, err := os.ReadFile(filepath.Join(dir, BinaryName(id, suffix)))
		if err != nil {
			t.Error(err)
			continue
		}
		if string(bin) != "build for "+platform+"\n" {
			t.Errorf("%s holds %q, want the build for %s", BinaryName(id, suffix), bin, platform)
		}
		line, err := os.ReadFile(filepath.Join(dir, ChecksumName(id, suffix)))
		if err != nil {
			t.Error(err)
		} else if string(line) != CheckLine(sha(string(bin)), suffix) {
			t.Errorf("%s = %q, want %q", ChecksumName(id, suffix), line, CheckLine(sha(string(bin)), suffix))
		}
		if latest, err := os.ReadFile(filepath.Join(dir, LatestName(suffix))); err != nil || string(latest) != id {
			t.Errorf("%s = %q, %v; want %q", LatestName(suffix), latest, err, id)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if _, ok := ParseName(e.Name()); !ok {
			t.Errorf("dist.sh wrote %s, which is not a published name", e.Name())
		}
	}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("dist/ holds\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(wantNames, "\n"))
	}
}
