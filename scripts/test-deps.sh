#!/usr/bin/env bash
# Installs what the tests need on a Debian machine, when it is missing:
#   git, gcc, make          the build and the git tools' tests
#   chromium, ffmpeg, xvfb  the browser and screen-recording tools' tests
#   matchbox-window-manager the desktop's window manager (internal/desktop)
#   x11-utils               xmessage, the X program the desktop tests open
#   x11-xserver-utils       xsetroot, which paints a live desktop in its tests
#   xterm                   the terminal the live desktop tests (web UI, VNC, sandbox) type into
#   vncsnapshot             a real VNC client for internal/rfb's tests
#   podman, runc,           the docker backend's tests (Podman's Docker-compatible
#   debootstrap             API service, and the test image scripts/test-image.sh makes)
#   bubblewrap, uidmap      the bwrap backend's tests
#   postgresql              the PostgreSQL store's tests (they start their own
#                           server from /usr/lib/postgresql/*/bin)
#   systemd                 systemd-analyze, which verifies the units of deploy/systemd
#   nginx                   the reverse proxy test (test/e2e/nginx_test.go runs its
#                           own nginx on loopback; the service Debian starts when
#                           it installs the package is stopped and disabled)
#   wine64,                 the Windows worker's end-to-end test (test/e2e/wine_test.go
#   gcc-mingw-w64-x86-64    runs outpost.exe under Wine; MinGW builds the DLL it needs)
#   iproute2, curl,         the egress engine's tests (network namespaces, veth
#   util-linux              pairs, curl run inside a session's namespace, unshare)
# and gives git an identity if it has none (tests commit to throwaway
# repositories). Run by `make test`; as root it installs with apt-get, with
# passwordless sudo through sudo, otherwise it says what to install.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

# have CMD: CMD is on the PATH, or is a path (a glob allowed) to a file.
have() { command -v "$1" >/dev/null 2>&1 || compgen -G "$1" >/dev/null; }

need=()
for pair in git:git gcc:gcc make:make chromium:chromium ffmpeg:ffmpeg Xvfb:xvfb \
  matchbox-window-manager:matchbox-window-manager xmessage:x11-utils xsetroot:x11-xserver-utils \
  xterm:xterm vncsnapshot:vncsnapshot \
  podman:podman runc:runc debootstrap:debootstrap bwrap:bubblewrap newuidmap:uidmap \
  '/usr/lib/postgresql/*/bin/initdb:postgresql' systemd-analyze:systemd nginx:nginx \
  ip:iproute2 curl:curl unshare:util-linux \
  '/usr/lib/wine/wine64:wine64' x86_64-w64-mingw32-gcc:gcc-mingw-w64-x86-64; do
  have "${pair%%:*}" || need+=("${pair##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo)
    else
      echo "test-deps: missing ${need[*]}; install them with:" >&2
      echo "  sudo apt-get install -y ${need[*]}" >&2
      echo "test-deps: tests that need them skip (or fail when CI is set)" >&2
      need=()
    fi
  fi
  if [ ${#need[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test-deps: installing ${need[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}"
    if [[ " ${need[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1 &&
      systemctl is-enabled nginx >/dev/null 2>&1; then
      "${sudo[@]}" systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
  elif [ ${#need[@]} -gt 0 ]; then
    echo "test-deps: missing ${need[*]} and no apt-get to install them" >&2
  fi
fi
