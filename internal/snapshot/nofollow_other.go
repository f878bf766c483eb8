//go:build !unix

package snapshot

const noFollow = 0
