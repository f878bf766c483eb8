package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON: the API object as the server sent it.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cols ...string) {
	for i, c := range cols {
		cols[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// fields writes "Key:  value" lines, aligned, skipping empty values.
func fields(w io.Writer, kv ...string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[i], kv[i+1])
		}
	}
	return tw.Flush()
}

// ago says how long before now a Unix time was, in one unit: "3m ago".
func ago(unix int64, now time.Time) string {
	if unix == 0 {
		return ""
	}
	d := now.Sub(time.Unix(unix, 0))
	switch {
	case d < 0:
		return "in " + roughDuration(-d)
	case d < time.Second:
		return "just now"
	}
	return roughDuration(d) + " ago"
}

func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// timestamp formats a Unix time for people, with how long ago it was.
func timestamp(unix *int64, now time.Time) string {
	if unix == nil || *unix == 0 {
		return ""
	}
	return time.Unix(*unix, 0).Local().Format("2006-01-02 15:04:05") + " (" + ago(*unix, now) + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
