package api

import (
	"slices"
	"testing"
)

func init() {
	examples[ToolNetworkAccessRequest] = []string{
		`{"domains":["api.example.test"],"reason":"The tests download fixtures from it."}`,
		`{"domains":["*.pkg.example.test","example.test"],"reason":"go mod download"}`,
	}
	invalid[ToolNetworkAccessRequest] = []string{
		`{"reason":"x"}`, `{"domains":[],"reason":"x"}`, `{"domains":["a.test"]}`, `{"domains":["a.test"],"reason":""}`,
		`{"domains":[""],"reason":"x"}`, `{"domains":"a.test","reason":"x"}`,
	}
}

// TestServerTools checks that network_access_request is the control
// plane's own: offered to agents, never listed as a remote's.
func TestServerTools(t *testing.T) {
	if !IsServerTool(ToolNetworkAccessRequest) || IsServerTool(ToolExec) || IsServerTool("nope") {
		t.Fatal("IsServerTool does not single out network_access_request")
	}
	remote := RemoteToolNames()
	if slices.Contains(remote, ToolNetworkAccessRequest) || len(remote) != len(ToolNames())-1 {
		t.Fatalf("RemoteToolNames() = %v", remote)
	}
	if !slices.Contains(ToolNames(), ToolNetworkAccessRequest) {
		t.Fatal("ToolNames() leaves out network_access_request")
	}
}
