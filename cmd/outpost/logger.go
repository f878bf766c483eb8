package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// Log formats of --log-format.
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// addLogFlags adds --log-level and --log-format to a long-running
// command.
func addLogFlags(fl *pflag.FlagSet, level, format *string) {
	fl.StringVar(level, "log-level", "info", "log level: debug, info, warn or error (env "+envLogLevel.Name+")")
	fl.StringVar(format, "log-format", logFormatText, "log format: text (key=value lines) or json (one JSON object a line) (env "+envLogFormat.Name+")")
}

// resolveLog reads the log flags not given from the environment and
// checks them.
func resolveLog(fl *pflag.FlagSet, getenv func(string) string, level, format *string) error {
	if v := envLogLevel.Get(getenv); v != "" && !fl.Changed("log-level") {
		*level = v
	}
	if v := envLogFormat.Get(getenv); v != "" && !fl.Changed("log-format") {
		*format = v
	}
	if _, err := parseLogLevel(*level); err != nil {
		return err
	}
	switch strings.ToLower(*format) {
	case logFormatText, logFormatJSON:
		return nil
	}
	return usageErrorf("--log-format must be %s or %s, not %q", logFormatText, logFormatJSON, *format)
}

// newLogger is the logger of a long-running command, writing to w at the
// level and in the format of its resolved log flags.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	l, _ := parseLogLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	if strings.EqualFold(format, logFormatJSON) {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
