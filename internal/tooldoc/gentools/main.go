// Command gentools writes the tool reference, docs/tools.md, from
// api.Tools(). Run it with go generate ./internal/tooldoc.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/tooldoc"
)

func main() {
	out := flag.String("o", "", "file to write (default standard output)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gentools:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	doc, err := tooldoc.Markdown(api.Tools())
	if err != nil {
		return err
	}
	if out == "" {
		_, err := os.Stdout.Write(doc)
		return err
	}
	// Write beside the target and rename, so a failed run leaves the old file.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".tools-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(doc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
