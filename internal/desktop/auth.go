package desktop

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// A desktop's display admits only clients that present its cookie
// (MIT-MAGIC-COOKIE-1): its socket is reachable by every process of the
// machine (the abstract one by every process of the network namespace), and
// other sessions must not see or drive its screen. The session's programs
// find the cookie through $XAUTHORITY, a file only the session's user can
// read.

const cookieName = "MIT-MAGIC-COOKIE-1"

// familyWild matches any host, as xauth's "ffff" entries do.
const familyWild = 0xffff

// newCookie returns 16 random bytes.
func newCookie() ([]byte, error) {
	c := make([]byte, 16)
	if _, err := rand.Read(c); err != nil {
		return nil, fmt.Errorf("make the display's cookie: %w", err)
	}
	return c, nil
}

// writeAuthority writes an Xauthority file holding cookie for display
// number num ("" for any), readable by its owner only.
func writeAuthority(path, num string, cookie []byte) error {
	var b bytes.Buffer
	for _, n := range []string{num, ""} {
		_ = binary.Write(&b, binary.BigEndian, uint16(familyWild))
		for _, field := range [][]byte{nil, []byte(n), []byte(cookieName), cookie} {
			_ = binary.Write(&b, binary.BigEndian, uint16(len(field)))
			b.Write(field)
		}
		if num == "" {
			break
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("write the display's authority file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the display's authority file: %w", err)
	}
	return nil
}

// authDir makes the private directory of a desktop's authority file.
func authDir(parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "outpost-desktop-")
	if err != nil {
		return "", fmt.Errorf("make the display's authority directory: %w", err)
	}
	return dir, nil
}

// dialDisplay connects to display number num's Unix socket, presenting
// cookie in the connection setup. xgb reads the cookie only from the
// process's $XAUTHORITY, so the setup request it writes is amended here
// instead: a desktop needs no process-wide setting.
func dialDisplay(num string, cookie []byte) (net.Conn, error) {
	conn, err := net.Dial("unix", filepath.Join("/tmp/.X11-unix", "X"+num))
	if err != nil {
		return nil, err
	}
	return &cookieConn{Conn: conn, cookie: cookie}, nil
}

// cookieConn replaces the authorization of the first write, the X
// connection setup request, with its cookie.
type cookieConn struct {
	net.Conn
	cookie []byte
	once   sync.Once
}

func (c *cookieConn) Write(p []byte) (int, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first || len(p) < 12 {
		return c.Conn.Write(p)
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if p[0] == 'B' {
		order = binary.BigEndian
	}
	nameLen, dataLen := int(order.Uint16(p[6:])), int(order.Uint16(p[8:]))
	if len(p) != 12+pad(nameLen)+pad(dataLen) {
		return c.Conn.Write(p) // not a setup request as xgb writes it
	}
	setup := make([]byte, 12, 12+pad(len(cookieName))+pad(len(c.cookie)))
	copy(setup, p[:12])
	order.PutUint16(setup[6:], uint16(len(cookieName)))
	order.PutUint16(setup[8:], uint16(len(c.cookie)))
	setup = append(setup, make([]byte, pad(len(cookieName)))...)
	copy(setup[12:], cookieName)
	setup = append(setup, make([]byte, pad(len(c.cookie)))...)
	copy(setup[12+pad(len(cookieName)):], c.cookie)
	if _, err := c.Conn.Write(setup); err != nil {
		return 0, err
	}
	return len(p), nil
}

func pad(n int) int { return (n + 3) &^ 3 }
