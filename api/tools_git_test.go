package api

// The git tools' examples for the catalogue's tests, added from this file so
// that tools added at the same time do not edit the same map literal.
func init() {
	examples[ToolGitStatus] = []string{`{"repo":"proj"}`}
	examples[ToolGitDiff] = []string{`{"repo":"proj"}`, `{"repo":"proj","staged":true,"paths":["a.go","docs"]}`}
	examples[ToolGitCheckout] = []string{`{"repo":"proj","ref":"main"}`, `{"repo":"p.1","ref":"fix/x","create":true}`}
	examples[ToolGitCommit] = []string{`{"repo":"proj","message":"fix x","all":true}`, `{"repo":"proj","message":"m","paths":["a.go"]}`}
	examples[ToolGitPush] = []string{`{"repo":"proj"}`, `{"repo":"proj","remote":"origin","branch":"fix/x","set_upstream":true}`}

	invalid[ToolGitStatus] = []string{`{}`, `{"repo":".."}`, `{"repo":"a/b"}`}
	invalid[ToolGitDiff] = []string{`{"repo":"-x"}`, `{"repo":"p","paths":"a"}`}
	invalid[ToolGitCheckout] = []string{`{"repo":"p"}`, `{"repo":"p","ref":""}`}
	invalid[ToolGitCommit] = []string{`{"repo":"p"}`, `{"repo":"p","message":""}`}
	invalid[ToolGitPush] = []string{`{"remote":"origin"}`, `{"repo":"p","set_upstream":"yes"}`}
}
