// Package lazyregexp is a regular expression compiled on first use, so
// that a package-level pattern costs nothing when a program starts. Every
// outpost process (each session's remote too) initialises every package it
// links; a counted repetition such as [a-z]{0,199} compiles to that many
// copies of its class, about half a millisecond each at start-up.
package lazyregexp

import (
	"regexp"
	"sync"
)

// Regexp is a regexp.Regexp compiled from its pattern the first time it
// is used. It panics then, as regexp.MustCompile does, if the pattern does
// not compile.
type Regexp struct {
	str  string
	once sync.Once
	rx   *regexp.Regexp
}

// New returns the lazily compiled regular expression of str.
func New(str string) *Regexp { return &Regexp{str: str} }

func (r *Regexp) re() *regexp.Regexp {
	r.once.Do(func() { r.rx = regexp.MustCompile(r.str) })
	return r.rx
}

// MatchString reports whether s contains any match of r.
func (r *Regexp) MatchString(s string) bool { return r.re().MatchString(s) }

// Match reports whether b contains any match of r.
func (r *Regexp) Match(b []byte) bool { return r.re().Match(b) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.re().FindStringSubmatch(s) }

// String returns the pattern.
func (r *Regexp) String() string { return r.str }
