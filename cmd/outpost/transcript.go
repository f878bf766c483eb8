package main

import (
	"io"
	"time"

	"github.com/outpost-sh/outpost/internal/logtext"
)

// The transcript's plain-text form is shared with the web UI's log
// download.

func newTranscriptPrinter(w io.Writer, loc *time.Location) *logtext.Printer {
	return logtext.NewPrinter(w, loc)
}

func statusText(status, detail string) string { return logtext.StatusText(status, detail) }

func reasonText(reason string) string { return logtext.ReasonText(reason) }
