package main

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
)

// commandSetting is one setting of a long-running command: its flag,
// which is also its key in a config file, the environment variable read
// when the flag is not given, its default, the field of F it fills and
// its check, which sees the command's options C. The flag's kind (string,
// duration, byte count, count, number, bool or repeatable string) follows from
// the field's Go type. A command's settings are a table of these, so that
// each is spelled once: help, variables, config keys and checks all come
// from its row.
type commandSetting[C, F any] struct {
	flag string
	// env is the variable read when the flag is not given, under either
	// of its names; the zero EnvVar when there is none.
	env api.EnvVar
	// usage is the flag's help. $ENV in it stands for env's names ("A, B"),
	// $NAME and $PUBLIC for one of them each.
	usage string
	// def is the default, of the field's type.
	def any
	// field returns the pointer the flag is bound to; nil for a check
	// alone.
	field func(*F) any
	// bareSeconds lets the variable of a duration be a number of seconds
	// too (OUTPOST_CLAIM_TTL=300), as these variables were first read.
	bareSeconds bool
	// want completes "OUTPOST_X=… is not " for a variable that does not
	// parse: what a value looks like.
	want string
	// least is the smallest value of a duration or number that refuse
	// lets through; refuse "" means no bound.
	least  int64
	refuse string
	// check, when set, is the setting's own check, run where the table
	// puts it: several look at other settings, which are read by then.
	check func(*C) error
	// zeroIsNone marks a flag whose 0 means none or no bound, which the
	// options the command starts spell as a negative value (their 0 is
	// the default).
	zeroIsNone bool
}

// hasEnv reports whether s has an environment variable.
func (s commandSetting[C, F]) hasEnv() bool {
	return len(s.env.Names()) > 0
}

// help is s's usage with its variable's names in place.
func (s commandSetting[C, F]) help() string {
	if !s.hasEnv() {
		return s.usage
	}
	return strings.NewReplacer("$ENV", envNames(s.env), "$NAME", s.env.Name, "$PUBLIC", s.env.Public).Replace(s.usage)
}

// addSettings adds the flags of rows to fl, bound to the fields of f.
// pflag's typed functions keep --help's type names and leave out zero
// defaults.
func addSettings[C, F any](fl *pflag.FlagSet, rows []commandSetting[C, F], f *F) {
	for _, s := range rows {
		if s.field == nil {
			continue // a check only
		}
		usage := s.help()
		switch p := s.field(f).(type) {
		case *string:
			fl.StringVar(p, s.flag, s.def.(string), usage)
		case *time.Duration:
			fl.DurationVar(p, s.flag, s.def.(time.Duration), usage)
		case *int64:
			fl.Int64Var(p, s.flag, s.def.(int64), usage)
		case *int:
			fl.IntVar(p, s.flag, s.def.(int), usage)
		case *bool:
			fl.BoolVar(p, s.flag, s.def.(bool), usage)
		case *float64:
			fl.Float64Var(p, s.flag, s.def.(float64), usage)
		case *[]string:
			def, _ := s.def.([]string)
			fl.StringArrayVar(p, s.flag, def, usage)
		default:
			panic(fmt.Sprintf("setting --%s: a field of type %T", s.flag, p))
		}
	}
}

// resolveSettings gives the settings of rows whose flags were not given
// the values of their variables, and checks them in the table's order: c
// is the command's options, f what the flags are bound to (within c).
// Text is read first, as reading it cannot fail: a check may then look at
// any text setting, and a variable that does not parse is reported where
// its setting's check is.
func resolveSettings[C, F any](rows []commandSetting[C, F], c *C, f *F, fl *pflag.FlagSet, getenv func(string) string) error {
	env := envFallback{fl: fl, getenv: getenv}
	for _, s := range rows {
		if p, ok := s.fieldOf(f).(*string); ok && s.hasEnv() {
			env.string(s.flag, s.env, p)
		}
	}
	for _, s := range rows {
		if err := s.resolve(c, f, fl, getenv); err != nil {
			return err
		}
	}
	return nil
}

// fieldOf is s's field in f; nil for a check only.
func (s commandSetting[C, F]) fieldOf(f *F) any {
	if s.field == nil {
		return nil
	}
	return s.field(f)
}

// resolve reads s's variable, unless s is text (read already) or its
// flag was given, then checks s.
func (s commandSetting[C, F]) resolve(c *C, f *F, fl *pflag.FlagSet, getenv func(string) string) error {
	p := s.fieldOf(f)
	if _, text := p.(*string); !text && !fl.Changed(s.flag) {
		if v := s.env.Get(getenv); v != "" {
			if err := s.parseEnv(p, v); err != nil {
				return usageErrorf("%s=%q is not %s", s.env.Name, v, s.want)
			}
		}
	}
	if n, ok := number(p); ok && s.refuse != "" && n < s.least {
		return usageErrorf("%s", s.refuse)
	}
	if s.check != nil {
		return s.check(c)
	}
	return nil
}

// parseEnv sets *p to the variable's value v. Byte counts are read in
// base 10 only, so 0x10 and 1_000, which the flag takes, are refused.
func (s commandSetting[C, F]) parseEnv(p any, v string) error {
	var err error
	switch p := p.(type) {
	case *time.Duration:
		if s.bareSeconds {
			*p, err = parseSeconds(v)
		} else {
			*p, err = time.ParseDuration(v)
		}
	case *int64:
		*p, err = strconv.ParseInt(v, 10, 64)
	case *[]string:
		// A list in one variable: its reader splits it (commas).
		*p = []string{v}
	default:
		return fmt.Errorf("setting --%s: no variable is read into a %T", s.flag, p)
	}
	return err
}

// number is the value at p of a duration or number; false for text, a
// bool, a list or a check without a field.
func number(p any) (int64, bool) {
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.Elem().CanInt() {
		return v.Elem().Int(), true
	}
	return 0, false
}

// noneIfZero gives the duration or number at p, when 0, the negative
// that means none.
func noneIfZero(p any) {
	if v := reflect.ValueOf(p).Elem(); v.IsZero() {
		v.SetInt(-1)
	}
}

// parseSeconds parses a Go duration or a bare number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
}

// envFallback gives a flag not set on the command line the value of its
// environment variable under either name (api.EnvVar: the OUTPOST_ name
// first, then the public one).
type envFallback struct {
	fl     *pflag.FlagSet
	getenv func(string) string
}

func (e envFallback) string(flag string, v api.EnvVar, dst *string) {
	if e.fl.Changed(flag) {
		return
	}
	if val := v.Get(e.getenv); val != "" {
		*dst = val
	}
}
