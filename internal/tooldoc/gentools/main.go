// Command gentools writes the tool reference, docs/tools.md, from
// api.Tools(). Run it with go generate ./internal/tooldoc.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
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
	// Written whole, so a failed run leaves the old file.
	return atomicfile.Write(out, doc, 0o644)
}
