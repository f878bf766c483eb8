//go:build linux

package egress

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawUDP sends one UDP datagram, built by hand, straight onto the
// namespace's TUN device through a packet socket: what session code with
// CAP_NET_RAW could do to pick any destination, loopback included.
func (s *session) rawUDP(t *testing.T, src, dst netip.AddrPort, payload []byte) {
	t.Helper()
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	var pkt []byte
	ethType := uint16(unix.ETH_P_IP)
	if dst.Addr().Is4() {
		pkt = make([]byte, 20, 20+len(udp))
		pkt[0] = 0x45
		binary.BigEndian.PutUint16(pkt[2:], uint16(20+len(udp)))
		pkt[8] = 64
		pkt[9] = unix.IPPROTO_UDP
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		copy(pkt[12:16], s4[:])
		copy(pkt[16:20], d4[:])
		binary.BigEndian.PutUint16(pkt[10:], ^checksum(0, pkt))
		// UDP checksum 0: none, allowed over IPv4.
	} else {
		ethType = unix.ETH_P_IPV6
		pkt = make([]byte, 40, 40+len(udp))
		pkt[0] = 0x60
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(udp)))
		pkt[6] = unix.IPPROTO_UDP
		pkt[7] = 64
		s16, d16 := src.Addr().As16(), dst.Addr().As16()
		copy(pkt[8:24], s16[:])
		copy(pkt[24:40], d16[:])
		pseudo := append(append(append([]byte{}, s16[:]...), d16[:]...), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, unix.IPPROTO_UDP)
		binary.BigEndian.PutUint16(udp[6:], ^checksum(uint32(checksum(0, pseudo)), udp))
	}
	pkt = append(pkt, udp...)
	err := s.ns.Do(func() error {
		ifi, err := net.InterfaceByName(tunName)
		if err != nil {
			return err
		}
		proto := ethType<<8 | ethType>>8 // network byte order
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(proto))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("send a raw packet on the TUN device: %v", err)
	}
}

// checksum folds b into the Internet checksum sum.
func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// TestRawPacketsCannotReachTheWorkersLoopback crafts datagrams on the TUN
// device: one to an address of the engine's own namespace arrives (the
// control), one to its loopback does not, even under an unrestricted policy.
func TestRawPacketsCannotReachTheWorkersLoopback(t *testing.T) {
	s := newSession(t, nil, nil)
	listen := func(addr string) net.PacketConn {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		return pc
	}
	reached := listen(netip.AddrPortFrom(worldAddr4, 0).String())
	loop := listen("127.0.0.1:0")
	src := netip.AddrPortFrom(tunAddr4.Addr(), 40000)
	s.rawUDP(t, src, netip.MustParseAddrPort(reached.LocalAddr().String()), []byte("control"))
	reached.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	if n, _, err := reached.ReadFrom(buf); err != nil || string(buf[:n]) != "control" {
		t.Fatalf("a crafted datagram to %s: %q, %v (the control must arrive)", reached.LocalAddr(), buf[:n], err)
	}
	reached6 := listen("[fd99::1]:0")
	s.rawUDP(t, netip.AddrPortFrom(tunAddr6.Addr(), 40003), netip.MustParseAddrPort(reached6.LocalAddr().String()), []byte("control 6"))
	reached6.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, _, err := reached6.ReadFrom(buf); err != nil || string(buf[:n]) != "control 6" {
		t.Fatalf("a crafted IPv6 datagram to %s: %q, %v (the control must arrive)", reached6.LocalAddr(), buf[:n], err)
	}
	loopPort := netip.MustParseAddrPort(loop.LocalAddr().String()).Port()
	// Loopback destinations, which the stack drops as martians, and
	// unspecified and broadcast ones, which it passes and the engine must
	// refuse: dialed from the host, 0.0.0.0 is the host's loopback.
	s.rawUDP(t, netip.AddrPortFrom(tunAddr4.Addr(), 40001), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), loopPort), []byte("escape 4"))
	s.rawUDP(t, netip.AddrPortFrom(tunAddr6.Addr(), 40002), netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), loopPort), []byte("escape mapped"))
	s.rawUDP(t, netip.AddrPortFrom(tunAddr4.Addr(), 40004), netip.AddrPortFrom(netip.MustParseAddr("0.0.0.0"), loopPort), []byte("escape any"))
	s.rawUDP(t, netip.AddrPortFrom(tunAddr6.Addr(), 40005), netip.AddrPortFrom(netip.MustParseAddr("::"), loopPort), []byte("escape any6"))
	s.rawUDP(t, netip.AddrPortFrom(tunAddr6.Addr(), 40006), netip.AddrPortFrom(netip.MustParseAddr("::1"), loopPort), []byte("escape 6"))
	s.rawUDP(t, netip.AddrPortFrom(tunAddr4.Addr(), 40007), netip.AddrPortFrom(netip.MustParseAddr("255.255.255.255"), loopPort), []byte("escape bcast"))
	loop.SetReadDeadline(time.Now().Add(time.Second))
	if n, _, err := loop.ReadFrom(buf); err == nil {
		t.Fatalf("a crafted datagram reached the worker's loopback: %q", buf[:n])
	}
	for _, a := range []string{"0.0.0.0", "::", "255.255.255.255"} {
		s.dec.wait(t, "deny udp to "+a, func(d Decision) bool {
			return !d.Allow && d.Protocol == ProtoUDP && d.Addr == netip.MustParseAddr(a) && d.Rule == ruleHostOnly
		})
	}
}
