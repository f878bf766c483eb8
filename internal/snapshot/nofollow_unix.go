//go:build unix

package snapshot

import "syscall"

// noFollow makes opening a file that is a symbolic link fail.
const noFollow = syscall.O_NOFOLLOW
