package api

// The browser and recording tools' examples for the catalogue tests, kept
// here so their rows stay with the tools.
func init() {
	examples[ToolBrowserNavigate] = []string{`{"url":"http://127.0.0.1:8080/"}`}
	examples[ToolBrowserClick] = []string{`{"selector":"#submit"}`}
	examples[ToolBrowserType] = []string{`{"selector":"input[name=q]","text":"hello"}`, `{"selector":"#q","text":""}`}
	examples[ToolBrowserPress] = []string{`{"key":"Enter"}`, `{"key":"a"}`}
	examples[ToolBrowserScreenshot] = []string{`{"name":"home.png","full_page":true}`, `{}`}
	examples[ToolBrowserText] = []string{`{"selector":"main"}`, `{}`}
	examples[ToolBrowserEval] = []string{`{"expression":"document.title"}`}
	examples[ToolBrowserConsole] = []string{`{}`}
	examples[ToolRecordStart] = []string{`{"name":"demo.webm"}`, `{}`}
	examples[ToolRecordStop] = []string{`{}`}

	invalid[ToolBrowserNavigate] = []string{`{}`, `{"url":""}`}
	invalid[ToolBrowserClick] = []string{`{}`, `{"selector":""}`}
	invalid[ToolBrowserType] = []string{`{"selector":"#q"}`, `{"text":"x"}`}
	invalid[ToolBrowserPress] = []string{`{}`, `{"key":""}`}
	invalid[ToolBrowserScreenshot] = []string{`{"name":"../x.png"}`, `{"full_page":"yes"}`}
	invalid[ToolBrowserText] = []string{`{"selector":1}`}
	invalid[ToolBrowserEval] = []string{`{}`, `{"expression":""}`}
	invalid[ToolRecordStart] = []string{`{"name":"a/b"}`}
}
