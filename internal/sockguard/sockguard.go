// Package sockguard closes the ways out of a restricted session's network
// namespace that a namespace does not close: socket families the kernel
// does not tie to a network namespace. AF_VSOCK is the one that matters: on
// a virtual machine it reaches the hypervisor's host (and its services)
// from any namespace, past the egress engine that decides everything else.
//
// The remote of a restricted session calls Apply before it runs anything:
// the seccomp filter it installs holds for it and every process it starts,
// and no process can remove it.
package sockguard

// Interface is the name of the TUN device the egress engine puts in a
// restricted session's network namespace. Its presence is how the remote
// knows it serves a restricted session: nothing session code controls
// decides it, since the remote checks before it runs any.
const Interface = "outpost0"
