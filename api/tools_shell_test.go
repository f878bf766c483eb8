package api

// Examples for the catalogue tests in catalog_test.go, for the shell, patch
// and search tools and read_file's line range.
func init() {
	examples[ToolReadFile] = append(examples[ToolReadFile], `{"path":"main.go","start_line":10,"end_line":20}`, `{"path":"a","start_line":3}`)
	invalid[ToolReadFile] = append(invalid[ToolReadFile], `{"path":"a","start_line":"1"}`)
	examples[ToolShellStart] = []string{`{"name":"main"}`, `{"name":"build_2-x"}`}
	invalid[ToolShellStart] = []string{`{}`, `{"name":""}`, `{"name":"a b"}`, `{"name":"a/b"}`}
	examples[ToolShellRun] = []string{`{"name":"main","command":"cd src && make","timeout_s":30}`, `{"name":"main","command":"ls"}`}
	invalid[ToolShellRun] = []string{`{"name":"main"}`, `{"command":"ls"}`, `{"name":"main","command":"ls","timeout_s":-1}`}
	examples[ToolShellWrite] = []string{`{"name":"main","text":"yes\n"}`}
	invalid[ToolShellWrite] = []string{`{"name":"main"}`, `{"name":"main","text":""}`}
	examples[ToolShellRead] = []string{`{"name":"main"}`, `{"name":"main","wait_ms":500}`}
	invalid[ToolShellRead] = []string{`{}`, `{"name":"main","wait_ms":-1}`, `{"name":"main","wait_ms":60001}`}
	examples[ToolShellInterrupt] = []string{`{"name":"main"}`}
	invalid[ToolShellInterrupt] = []string{`{}`, `{"name":"x y"}`}
	examples[ToolShellKill] = []string{`{"name":"main"}`}
	invalid[ToolShellKill] = []string{`{}`}
	examples[ToolApplyPatch] = []string{`{"patch":"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}`}
	invalid[ToolApplyPatch] = []string{`{}`, `{"patch":""}`}
	examples[ToolGlob] = []string{`{"pattern":"src/**/*.go"}`, `{"pattern":"/etc/*.conf"}`}
	invalid[ToolGlob] = []string{`{}`, `{"pattern":""}`}
	examples[ToolGrep] = []string{
		`{"pattern":"func main","path":"src","include":"*.go","max_matches":10,"ignore_case":true}`,
		`{"pattern":"TODO"}`,
	}
	invalid[ToolGrep] = []string{`{}`, `{"pattern":""}`, `{"pattern":"x","max_matches":-1}`}
}
