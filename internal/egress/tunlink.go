//go:build linux

package egress

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/rawfile"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// vnetHdrSize is the size of struct virtio_net_hdr, which precedes every
// packet on a TUN device opened with IFF_VNET_HDR (the kernel's default
// header size).
const vnetHdrSize = 10

// vnetHdrGSOType is the offset of virtio_net_hdr.gso_type, the one field
// the link reads.
const vnetHdrGSOType = 1

// readSizes are the sizes of the buffers one read fills, smallest first,
// as gVisor's own fd endpoint lays them out: a small packet (an ACK, a DNS
// question) takes only the first and the others wait for the next read, so
// a queued segment pins about its own size, and a full 64 KB packet needs no
// copy.
var readSizes = []int{128, 256, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}

// tunLink is the stack's link to a TUN device opened with IFF_VNET_HDR and
// checksum offload (TUN_F_CSUM). gVisor's fdbased endpoint understands a
// virtio-net header only on sockets, so the engine reads and writes the
// device itself.
//
// What the offload buys: without it the TUN device cannot take a partial
// checksum, so the kernel computes every segment the session sends in
// software (csum_partial) before handing it over, a pass over every byte
// that nothing checks: the stack, which terminates every connection here
// and forwards no packet, skips it (CapabilityRXChecksumOffload). With it
// the kernel hands the segment over as it is, marked
// VIRTIO_NET_HDR_F_NEEDS_CSUM. Reading the device here also delivers each
// packet from the goroutine that read it, without the hand-off to a
// processor goroutine that fdbased makes. TSO stays off: the device's MTU already
// lets the kernel send 64 KB segments, and a GSO packet would need
// splitting. Packets written to the session carry an empty header, so the
// kernel checks their checksums as it did. Where the kernel refuses the
// header or the offload, NewNamespace opens a plain device and the link
// reads and writes bare packets (hdrLen 0).
type tunLink struct {
	fd int
	// hdrLen is the virtio-net header's size: vnetHdrSize, or 0 on a
	// device opened without one (no offload, each packet alone).
	hdrLen int

	// stopFD is an eventfd whose counter stops the read loop.
	// Close-on-exec, unlike the one gVisor's fdbased endpoint makes (and
	// never closes), which a child started meanwhile would inherit.
	stopFD   int
	stopOnce sync.Once

	mu         sync.RWMutex // guards the following
	mtu        uint32
	dispatcher stack.NetworkDispatcher
	stopped    bool // no read loop may start: stopFD is or will be closed

	wg sync.WaitGroup // the read loop
}

var _ stack.LinkEndpoint = (*tunLink)(nil)

// newTUNLink returns a link on the TUN queue fd. The caller keeps fd, calls
// shutdown before it closes or waits for the stack, and closes fd after.
func newTUNLink(fd int, mtu uint32, vnetHdr bool) (*tunLink, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	l := &tunLink{fd: fd, mtu: mtu, stopFD: efd}
	if vnetHdr {
		l.hdrLen = vnetHdrSize
	}
	return l, nil
}

// shutdown stops the read loop, waits for it and releases the link's
// eventfd; the link delivers nothing after. It must run before the stack is
// closed and waited for: gVisor detaches a link while holding the stack's
// lock, which a packet being delivered needs, so a loop still delivering
// then would never end.
func (l *tunLink) shutdown() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		one := [8]byte{1} // eventfd takes a native-endian uint64
		unix.Write(l.stopFD, one[:])
		l.wg.Wait()
		unix.Close(l.stopFD)
	})
}

// MTU implements stack.LinkEndpoint.
func (l *tunLink) MTU() uint32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mtu
}

// SetMTU implements stack.LinkEndpoint.
func (l *tunLink) SetMTU(mtu uint32) {
	l.mu.Lock()
	l.mtu = mtu
	l.mu.Unlock()
}

// MaxHeaderLength implements stack.LinkEndpoint: a TUN device has no link
// header (the virtio-net header is written from its own buffer).
func (*tunLink) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint.
func (*tunLink) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint.
func (*tunLink) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint.
func (*tunLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// ARPHardwareType implements stack.LinkEndpoint.
func (*tunLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint.
func (*tunLink) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (*tunLink) ParseHeader(*stack.PacketBuffer) bool { return true }

// Close implements stack.LinkEndpoint; the namespace owns the descriptor.
func (*tunLink) Close() {}

// SetOnCloseAction implements stack.LinkEndpoint.
func (*tunLink) SetOnCloseAction(func()) {}

// IsAttached implements stack.LinkEndpoint.
func (l *tunLink) IsAttached() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dispatcher != nil
}

// Attach implements stack.LinkEndpoint: a dispatcher starts the read loop
// (once); nil, the NIC going away, stops it (see shutdown).
func (l *tunLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.shutdown()
		l.mu.Lock()
		l.dispatcher = nil
		l.mu.Unlock()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dispatcher != nil || l.stopped {
		return
	}
	l.dispatcher = d
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.readLoop(d)
	}()
}

// Wait implements stack.LinkEndpoint.
func (l *tunLink) Wait() { l.wg.Wait() }

// readLoop delivers the device's packets to d until the link is stopped or
// the device fails.
func (l *tunLink) readLoop(d stack.NetworkDispatcher) {
	var hdr [vnetHdrSize]byte
	views := make([]*buffer.View, len(readSizes))
	// With a header, the first iovec takes it and the views follow.
	first := 0
	if l.hdrLen > 0 {
		first = 1
	}
	iovecs := make([]unix.Iovec, first+len(readSizes))
	if first == 1 {
		iovecs[0] = unix.Iovec{Base: &hdr[0]}
		iovecs[0].SetLen(l.hdrLen)
	}
	defer func() {
		for _, v := range views {
			if v != nil {
				v.Release()
			}
		}
	}()
	for {
		for i, v := range views {
			if v == nil {
				v = buffer.NewViewSize(readSizes[i])
				views[i] = v
				iovecs[first+i] = unix.Iovec{Base: v.BasePtr()}
				iovecs[first+i].SetLen(v.Size())
			}
		}
		n, errno := rawfile.BlockingReadvUntilStopped(l.stopFD, l.fd, iovecs)
		if n < 0 || (n == 0 && errno == 0) {
			return // stopped
		}
		if errno != 0 {
			if errno == unix.EINTR || errno == unix.EAGAIN {
				continue
			}
			return
		}
		n -= l.hdrLen
		// A GSO packet cannot arrive while TSO is off; one that did would
		// be a bundle of segments the stack cannot take as one.
		if n <= 0 || (l.hdrLen > 0 && hdr[vnetHdrGSOType] != 0) {
			continue
		}
		var proto tcpip.NetworkProtocolNumber
		views0 := views[0].AsSlice()
		switch header.IPVersion(views0) {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		default:
			continue
		}
		var payload buffer.Buffer
		for i, v := range views {
			if n <= 0 {
				break
			}
			if v.Size() > n {
				v.CapLength(n)
			}
			n -= v.Size()
			payload.Append(v)
			views[i] = nil
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
		d.DeliverNetworkPacket(proto, pkt)
		pkt.DecRef()
	}
}

// WritePackets implements stack.LinkEndpoint: one writev per packet (a TUN
// device takes one packet per write), each after an empty virtio-net header.
func (l *tunLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	var hdr [vnetHdrSize]byte
	var arr [8]unix.Iovec
	written := 0
	for _, pkt := range pkts.AsSlice() {
		iovecs := arr[:0]
		if l.hdrLen > 0 {
			iovecs = append(iovecs, unix.Iovec{Base: &hdr[0]})
			iovecs[0].SetLen(l.hdrLen)
		}
		for _, s := range pkt.AsSlices() {
			if len(s) == 0 {
				continue
			}
			iov := unix.Iovec{Base: &s[0]}
			iov.SetLen(len(s))
			iovecs = append(iovecs, iov)
		}
		if errno := rawfile.NonBlockingWriteIovec(l.fd, iovecs); errno != 0 {
			return written, tcpip.TranslateErrno(errno)
		}
		written++
	}
	return written, nil
}

// setTUNOffload turns on checksum offload on a TUN device opened with
// IFF_VNET_HDR, checking first that the kernel's virtio-net header is the
// size the link reads.
func setTUNOffload(fd int) error {
	sz, err := unix.IoctlGetInt(fd, unix.TUNGETVNETHDRSZ)
	if err != nil {
		return err
	}
	if sz != vnetHdrSize {
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrSize); err != nil {
			return err
		}
	}
	return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM)
}
