package osservice

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"slices"
	"strconv"
)

// LaunchdJob is a launchd job running a worker: a LaunchDaemon (the
// system domain, started at boot without a login, as UserName) or a
// LaunchAgent (a user's GUI domain, started at their login, in their
// graphical session).
type LaunchdJob struct {
	// Label names the job, e.g. sh.outpost.worker.gpu-h200; the plist is
	// Label + ".plist".
	Label string
	// ProgramArguments is the command, the executable first.
	ProgramArguments []string
	// UserName runs a daemon as this user; "" for an agent (it runs as
	// its user anyway).
	UserName string
	// WorkingDirectory is the worker's workspace.
	WorkingDirectory string
	// Environment is the job's environment: launchd starts jobs with
	// almost none.
	Environment map[string]string
	// StdoutPath and StderrPath receive the worker's output and log.
	StdoutPath, StderrPath string
	// ExitTimeout is how long launchd waits after SIGTERM before SIGKILL:
	// the worker's grace period and some.
	ExitTimeout int
	// Agent marks a LaunchAgent: its process type is Interactive, so
	// macOS does not throttle it as background work (a session driving
	// the screen or a simulator is not background work).
	Agent bool
}

// LaunchdLabel is the label of the worker job for outpost.
func LaunchdLabel(outpost string) string { return "sh.outpost.worker." + outpost }

// plist value encoders. launchd reads the XML property list format; a
// dict is a sequence of key and value elements.
type (
	plistKey    string
	plistString string
	plistInt    int
	plistBool   bool
	plistArray  []any
	plistDict   []plistEntry
	plistEntry  struct {
		key string
		val any
	}
)

// Plist is the job's property list, in XML with the DOCTYPE launchd's
// own files carry.
func (j LaunchdJob) Plist() ([]byte, error) {
	d := plistDict{{"Label", plistString(j.Label)}}
	args := plistArray{}
	for _, a := range j.ProgramArguments {
		args = append(args, plistString(a))
	}
	d = append(d, plistEntry{"ProgramArguments", args})
	if j.UserName != "" {
		d = append(d, plistEntry{"UserName", plistString(j.UserName)})
	}
	if j.WorkingDirectory != "" {
		d = append(d, plistEntry{"WorkingDirectory", plistString(j.WorkingDirectory)})
	}
	if len(j.Environment) > 0 {
		var env plistDict
		keys := make([]string, 0, len(j.Environment))
		for k := range j.Environment {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env = append(env, plistEntry{k, plistString(j.Environment[k])})
		}
		d = append(d, plistEntry{"EnvironmentVariables", env})
	}
	d = append(d,
		plistEntry{"RunAtLoad", plistBool(true)},
		// Restarted whenever it exits, after ThrottleInterval: a worker
		// exits only when stopped or when it cannot go on.
		plistEntry{"KeepAlive", plistBool(true)},
		plistEntry{"ThrottleInterval", plistInt(10)},
	)
	if j.ExitTimeout > 0 {
		d = append(d, plistEntry{"ExitTimeOut", plistInt(j.ExitTimeout)})
	}
	if j.Agent {
		d = append(d, plistEntry{"ProcessType", plistString("Interactive")})
	}
	if j.StdoutPath != "" {
		d = append(d, plistEntry{"StandardOutPath", plistString(j.StdoutPath)})
	}
	if j.StderrPath != "" {
		d = append(d, plistEntry{"StandardErrorPath", plistString(j.StderrPath)})
	}

	var b bytes.Buffer
	b.WriteString(xml.Header)
	b.WriteString(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n")
	b.WriteString(`<plist version="1.0">` + "\n")
	if err := writePlist(&b, d, 0); err != nil {
		return nil, err
	}
	b.WriteString("</plist>\n")
	return b.Bytes(), nil
}

// writePlist writes v at indent depth, escaping text with encoding/xml.
func writePlist(b *bytes.Buffer, v any, depth int) error {
	ind := bytes.Repeat([]byte("\t"), depth)
	text := func(tag, s string) error {
		b.Write(ind)
		fmt.Fprintf(b, "<%s>", tag)
		if err := xml.EscapeText(b, []byte(s)); err != nil {
			return err
		}
		fmt.Fprintf(b, "</%s>\n", tag)
		return nil
	}
	switch v := v.(type) {
	case plistString:
		return text("string", string(v))
	case plistKey:
		return text("key", string(v))
	case plistInt:
		return text("integer", strconv.Itoa(int(v)))
	case plistBool:
		b.Write(ind)
		if v {
			b.WriteString("<true/>\n")
		} else {
			b.WriteString("<false/>\n")
		}
	case plistArray:
		b.Write(ind)
		b.WriteString("<array>\n")
		for _, e := range v {
			if err := writePlist(b, e, depth+1); err != nil {
				return err
			}
		}
		b.Write(ind)
		b.WriteString("</array>\n")
	case plistDict:
		b.Write(ind)
		b.WriteString("<dict>\n")
		for _, e := range v {
			if err := writePlist(b, plistKey(e.key), depth+1); err != nil {
				return err
			}
			if err := writePlist(b, e.val, depth+1); err != nil {
				return err
			}
		}
		b.Write(ind)
		b.WriteString("</dict>\n")
	default:
		return fmt.Errorf("plist: cannot encode %T", v)
	}
	return nil
}

// LaunchdDomain is the launchctl domain of a daemon ("system") or of the
// agent of the user with uid ("gui/UID").
func LaunchdDomain(agent bool, uid int) string {
	if agent {
		return "gui/" + strconv.Itoa(uid)
	}
	return "system"
}
