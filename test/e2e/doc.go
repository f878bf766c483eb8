// Package e2e holds the end-to-end tests: real outpost binaries over
// loopback. They run on Linux hosts only (isolation users, network
// namespaces, bwrap); Windows and macOS workers are checked by `make cross`
// and by the tests that run a Windows build under Wine.
package e2e
