// Package cliconfig fills a command's flags from a YAML config file: each
// key is a flag's name and its value what the flag would be given
// (`listen: 0.0.0.0:7420`, `claim-ttl: 300s`, a list for a repeatable
// flag).
//
// A file value takes the place of the flag's default: a flag given on the
// command line beats it, and so does any fallback a command applies when
// its flag was not given (an environment variable), because the flag is
// left unchanged in pflag's sense. The precedence is therefore flag, then
// environment, then file, then default.
package cliconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// annotation marks a flag whose value came from a config file: the file's
// path and the flag's value as the file set it.
const annotation = "cliconfig/file"

// reserved are flag names a file may not set.
var reserved = map[string]string{
	"config": "a config file cannot name another one",
	"help":   "help is not a setting",
}

// Apply reads the YAML file at path and gives every flag of fl it names
// that was not set on the command line the file's value. Unknown keys,
// values of the wrong type and values a flag rejects are errors naming the
// file and the key (keys are applied in order, so on an error some flags
// may hold file values already: the command must not run).
func Apply(fl *pflag.FlagSet, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the config file: %w", err)
	}
	values, err := parse(raw)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if err := apply(fl, path, key, values[key]); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
	}
	return nil
}

// FromFile reports whether flag name of fl has its value from a config
// file: not given on the command line, but set by Apply.
func FromFile(fl *pflag.FlagSet, name string) bool {
	f := fl.Lookup(name)
	return f != nil && len(f.Annotations[annotation]) > 0
}

// parse decodes a YAML mapping, keeping numbers as written.
func parse(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	switch d := doc.(type) {
	case nil:
		return nil, nil // only comments
	case map[string]any:
		return d, nil
	}
	return nil, errors.New("want a mapping of flag names to values, such as \"listen: 0.0.0.0:7420\"")
}

// apply sets the flag key to the file's value v unless the command line
// gave it.
func apply(fl *pflag.FlagSet, path, key string, v any) error {
	if why, ok := reserved[key]; ok {
		return fmt.Errorf("key %q: %s", key, why)
	}
	f := fl.Lookup(key)
	if f == nil {
		if s := suggest(fl, key); s != "" {
			return fmt.Errorf("unknown key %q (did you mean %q?)", key, s)
		}
		return fmt.Errorf("unknown key %q: each key is the name of one of the command's flags (see --help)", key)
	}
	if f.Changed {
		return nil
	}
	if v == nil {
		return fmt.Errorf("%s has no value; give one or remove the key to keep the default", key)
	}
	typ := f.Value.Type()
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items, ok := v.([]any)
		if !ok {
			items = []any{v}
		}
		list := make([]string, 0, len(items))
		for i, it := range items {
			s, err := scalar(typ, it)
			if err != nil {
				return fmt.Errorf("%s, item %d: %w", key, i+1, err)
			}
			list = append(list, s)
		}
		if err := sv.Replace(list); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	} else {
		s, err := scalar(typ, v)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if err := f.Value.Set(s); err != nil {
			return fmt.Errorf("%s: %q is not %s", key, s, describe(typ))
		}
	}
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[annotation] = []string{path, f.Value.String()}
	return nil
}

// Overridden returns the flags of fl whose value no longer is the one the
// config file gave them: a command's fallback (an environment variable)
// replaced it after Apply. Commands log these, so a setting in the file
// that has no effect does not go unnoticed.
func Overridden(fl *pflag.FlagSet) []string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) {
		if a := f.Annotations[annotation]; len(a) == 2 && f.Value.String() != a[1] {
			names = append(names, f.Name)
		}
	})
	return names
}

// scalar turns one YAML value into the text the flag's Set parses, or says
// why it has the wrong type.
func scalar(typ string, v any) (string, error) {
	want := describe(typ)
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		switch typ {
		case "duration":
			return "", fmt.Errorf("%s is a number, not %s (write %ss for seconds)", v, want, v)
		case "bool":
			return "", fmt.Errorf("%s is a number, not %s", v, want)
		}
		return v.String(), nil
	case bool:
		if typ == "bool" {
			return fmt.Sprint(v), nil
		}
		return "", fmt.Errorf("%v is a boolean, not %s (quote it if you mean the text)", v, want)
	case []any:
		return "", fmt.Errorf("a list, not %s: only repeatable flags take a list", want)
	case map[string]any:
		return "", fmt.Errorf("a mapping, not %s", want)
	case nil:
		return "", fmt.Errorf("no value, not %s", want)
	}
	return "", fmt.Errorf("a %T, not %s", v, want)
}

// describe names what a flag of pflag type typ takes.
func describe(typ string) string {
	switch typ {
	case "duration":
		return "a duration such as 300s, 5m or 1h30m"
	case "bool":
		return "true or false"
	case "int", "int64", "int32", "uint", "uint64", "uint32":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "string", "stringArray", "stringSlice":
		return "a string"
	}
	return "a " + typ
}

// suggest returns the flag of fl whose name is closest to key, if one is
// close enough to be a likely typo.
func suggest(fl *pflag.FlagSet, key string) string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" || reserved[f.Name] != "" {
			return
		}
		names = append(names, f.Name)
	})
	return Closest(strings.ReplaceAll(key, "_", "-"), names)
}

// Closest returns the name of names closest to key (ignoring case), if
// one is close enough to be a likely typo of it: at most two edits away,
// or, for a key of four characters or more, a prefix of it or it of one.
// It returns "" when none is.
func Closest(key string, names []string) string {
	norm := strings.ToLower(key)
	best, bestD := "", 3
	for _, name := range names {
		d := distance(norm, strings.ToLower(name))
		if len(norm) >= 4 && (strings.HasPrefix(name, norm) || strings.HasPrefix(norm, name)) {
			d = min(d, 2)
		}
		if d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
