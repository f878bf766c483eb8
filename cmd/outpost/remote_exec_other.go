//go:build !unix

package main

import "errors"

// execRemote is not available here: workers hand sessions over on
// standard input only where remotes can be pre-started (Unix).
func execRemote(command []string) error {
	return errors.New("handing a session to another remote build is not supported on this platform")
}
