package api

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// toolDef is one tool: its name, what it does, its argument type, and how
// a call of it reads to people. The argument type is the one the remote
// decodes (strictly) and the one its JSON schema is generated from, so there
// is one definition per tool.
type toolDef struct {
	name        string
	description string
	// newArgs returns a pointer to a zero argument value.
	newArgs func() any
	// schema generates the argument type's JSON schema.
	schema func() (*jsonschema.Schema, error)
	// refine adds constraints that a Go type cannot express (bounds,
	// patterns); it must not add, remove or rename properties. May be nil.
	refine func(*jsonschema.Schema)
	// target is CallTarget of the tool's arguments; nil for a tool without
	// arguments to show.
	target func(args json.RawMessage) string
	// summary is ResultSummary of the tool's result value; nil for a tool
	// whose result says nothing a transcript line needs (exec's exit code
	// has a line of its own).
	summary func(value json.RawMessage) string
	// server marks a tool the control plane answers itself: its calls
	// never reach the remote.
	server bool
}

// tool defines a tool whose arguments are a T. target says what a call
// works on (nil: nothing to show); summary, made by textOf, what a
// successful result did (nil: nothing to add).
func tool[T any](name, description string, refine func(*jsonschema.Schema), target func(T) string, summary func(json.RawMessage) string) toolDef {
	d := toolDef{
		name:        name,
		description: description,
		newArgs:     func() any { return new(T) },
		schema:      func() (*jsonschema.Schema, error) { return jsonschema.For[T](schemaOptions) },
		refine:      refine,
		summary:     summary,
	}
	if target != nil {
		d.target = textOf(target)
	}
	return d
}

// toolTable is the one list of tools, in the order ToolNames and Tools give
// them. The control plane validates script steps against it, models and MCP
// clients are shown the schemas generated from it, and docs/tools.md is
// rendered from it.
var toolTable = []toolDef{
	tool[ExecArgs](ToolExec,
		"Run a command in the workspace on the remote machine and return its exit code, duration and the tail of its "+
			"combined output (the full output streams as it runs). Set exactly one of command (a shell command line, "+
			"run by the shell: sh -c on Linux, the user's shell on macOS, PowerShell or cmd.exe on Windows; the shell argument chooses) and argv (a program and its arguments, run without a shell). cwd is relative to the workspace "+
			"unless absolute; the command and its children are killed after timeout_s seconds (default 600).",
		func(s *jsonschema.Schema) {
			prop(s, "argv").MinItems = jsonschema.Ptr(1)
			prop(s, "timeout_s").Minimum = jsonschema.Ptr(0.0)
			prop(s, "shell").Enum = []any{ShellSh, ShellBash, ShellZsh, ShellPowerShell, ShellPwsh, ShellCmd}
		}, execTarget, nil),
	tool[ReadFileArgs](ToolReadFile,
		"Read a text file and return its content and size in bytes. path is relative to the workspace unless absolute. "+
			"start_line and end_line (1-based, inclusive) return only those lines. Files over 10 MiB are refused: read part of "+
			"them with exec (head, tail, sed -n); directories are refused: use list_dir; binary files (a NUL byte in the "+
			"first 8 KiB) are refused: use exec with xxd or base64.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
		}, readFileTarget, textOf(readFileSummary)),
	tool[WriteFileArgs](ToolWriteFile,
		"Write a file with the given content, replacing it whole if it exists (its mode is kept) and creating parent "+
			"directories; return the number of bytes written. path is relative to the workspace unless absolute. "+
			"The write is atomic (a temporary file and a rename), and a symlink is written through.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
		}, writeFileTarget, textOf(writeFileSummary)),
	tool[EditFileArgs](ToolEditFile,
		"Replace the text old with new in a file and return the 1-based line where the replacement starts. "+
			"old must occur exactly once in the file, whitespace included: include surrounding lines to make it unique. "+
			"path is relative to the workspace unless absolute; files over 10 MiB are refused.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
			prop(s, "old").MinLength = jsonschema.Ptr(1)
		}, editFileTarget, textOf(editFileSummary)),
	tool[ListDirArgs](ToolListDir,
		"List a directory, sorted by name: each entry's name, type (file, dir, symlink or other) and, for files, size in bytes. "+
			"path is relative to the workspace unless absolute; empty or absent lists the workspace.",
		nil, listDirTarget, textOf(listDirSummary)),
	tool[GitCloneArgs](ToolGitClone,
		"Clone a git repository into repos/<name> in the workspace, or, when that clone is already there, set its origin "+
			"to url and fetch; then check out ref if given. Return the clone's path, its HEAD commit and whether an "+
			"existing clone was reused.",
		func(s *jsonschema.Schema) {
			prop(s, "url").MinLength = jsonschema.Ptr(1)
			prop(s, "name").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, gitCloneTarget, textOf(gitCloneSummary)),
	tool[BrowserNavigateArgs](ToolBrowserNavigate,
		"Load a URL in the session's headless browser (started on first use, one per session, closed when the session "+
			"ends) and wait for the page to load; return the final URL (after redirects) and the page title.",
		func(s *jsonschema.Schema) {
			prop(s, "url").MinLength = jsonschema.Ptr(1)
		}, browserNavigateTarget, textOf(browserNavigateSummary)),
	tool[BrowserClickArgs](ToolBrowserClick,
		"Click the first element matching a CSS selector in the browser's page, waiting up to the call's timeout for it to be visible.",
		func(s *jsonschema.Schema) {
			prop(s, "selector").MinLength = jsonschema.Ptr(1)
		}, browserClickTarget, nil),
	tool[BrowserTypeArgs](ToolBrowserType,
		"Focus the first element matching a CSS selector in the browser's page and type text into it, key by key.",
		func(s *jsonschema.Schema) {
			prop(s, "selector").MinLength = jsonschema.Ptr(1)
		}, browserTypeTarget, nil),
	tool[BrowserPressArgs](ToolBrowserPress,
		"Press one key (a character or a name such as Enter, Tab, Escape, Backspace, ArrowDown) in the browser's focused element.",
		func(s *jsonschema.Schema) {
			prop(s, "key").MinLength = jsonschema.Ptr(1)
		}, browserPressTarget, nil),
	tool[BrowserScreenshotArgs](ToolBrowserScreenshot,
		"Take a PNG screenshot of the browser's viewport, or of the whole page with full_page, and return the file's path, "+
			"size and pixel dimensions.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, browserScreenshotTarget, textOf(browserFileSummary)),
	tool[BrowserTextArgs](ToolBrowserText,
		"Return the readable text (as rendered, without markup) of the browser's page or of the first element matching a "+
			"CSS selector; long text is truncated to 100 000 characters.",
		nil, browserTextTarget, textOf(browserTextSummary)),
	tool[BrowserEvalArgs](ToolBrowserEval,
		"Evaluate a JavaScript expression in the browser's page (awaiting a promise) and return its value as JSON.",
		func(s *jsonschema.Schema) {
			prop(s, "expression").MinLength = jsonschema.Ptr(1)
		}, browserEvalTarget, nil),
	tool[BrowserConsoleArgs](ToolBrowserConsole,
		"Return the browser's console messages and uncaught page errors collected since the previous browser_console call.",
		nil, nil, textOf(browserConsoleSummary)),
	tool[RecordStartArgs](ToolRecordStart,
		"Start recording the browser's screen into a video (MP4, or WebM when name ends in .webm) with ffmpeg; "+
			"stop it with record_stop. Only one recording runs at a time.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, recordStartTarget, textOf(recordStartSummary)),
	tool[RecordStopArgs](ToolRecordStop,
		"Stop the running screen recording and return the video file's path, size, duration and frame count.",
		nil, nil, textOf(browserFileSummary)),
	tool[ComputerArgs](ToolComputer,
		"Use the session's desktop as a person would, with Anthropic's computer-use actions: screenshot; left_click, "+
			"right_click, middle_click, double_click, triple_click (at coordinate, else where the pointer is; text or key holds "+
			"modifier keys); left_click_drag (start_coordinate to coordinate); left_mouse_down, left_mouse_up (at coordinate, "+
			"else where the pointer is); mouse_move; scroll (scroll_direction, scroll_amount); type (text); key and hold_key (text such as ctrl+a or Return; "+
			"hold_key for duration seconds); cursor_position; wait (duration seconds); zoom (region [x0, y0, x1, y1] "+
			"returned at full resolution). Coordinates are in the screenshot's pixels. Every action but cursor_position "+
			"returns a PNG screenshot taken after it (image, width, height). Offered only when the session has a desktop.",
		func(s *jsonschema.Schema) {
			a := prop(s, "action")
			for _, name := range ComputerActions {
				a.Enum = append(a.Enum, name)
			}
			for _, name := range []string{"coordinate", "start_coordinate"} {
				c := prop(s, name)
				c.MinItems, c.MaxItems = jsonschema.Ptr(2), jsonschema.Ptr(2)
				c.Items = &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(0.0)}
			}
			r := prop(s, "region")
			r.MinItems, r.MaxItems = jsonschema.Ptr(4), jsonschema.Ptr(4)
			r.Items = &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(0.0)}
			prop(s, "scroll_direction").Enum = []any{"up", "down", "left", "right"}
			prop(s, "scroll_amount").Minimum = jsonschema.Ptr(0.0)
			prop(s, "scroll_amount").Maximum = jsonschema.Ptr(float64(ComputerMaxScroll))
			prop(s, "duration").Minimum = jsonschema.Ptr(0.0)
			prop(s, "duration").Maximum = jsonschema.Ptr(float64(ComputerMaxDurationS))
		}, computerTarget, textOf(computerSummary)),
	tool[UploadArtifactArgs](ToolUploadArtifact,
		"Upload a file from the remote machine to the control plane as an artifact of the session, to be listed and "+
			"downloaded later (GET /v1/sessions/{id}/artifacts, outpost sessions artifacts); return its name, size, content "+
			"type and SHA-256. path is relative to the workspace unless absolute; name defaults to the file's base name and "+
			"replaces an artifact of the same name. Files over 100 MiB are refused, as is more than 1 GiB per session.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
			prop(s, "name").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
		}, uploadArtifactTarget, textOf(uploadArtifactSummary)),
	tool[ShellStartArgs](ToolShellStart,
		"Start a persistent shell (bash, else sh) named name in the workspace, on a terminal, with the session's "+
			"environment; it lives until shell_kill or the end of the session. Return its program and process id.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
		}, shellStartTarget, textOf(shellStartSummary)),
	tool[ShellRunArgs](ToolShellRun,
		"Run a command in a persistent shell and wait for it: its output is the call's output, and the result holds its "+
			"exit code. cd, exported variables and functions persist between runs. A command still running after "+
			"timeout_s seconds (default 600) keeps running and the result says so: follow it with shell_read, answer its "+
			"prompts with shell_write, stop it with shell_interrupt. Output not read before (of background jobs, say) comes first; "+
			"output beyond 1 MiB not yet read is dropped, oldest first.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
			prop(s, "timeout_s").Minimum = jsonschema.Ptr(0.0)
		}, shellRunTarget, textOf(shellRunSummary)),
	tool[ShellWriteArgs](ToolShellWrite,
		"Write raw text to a persistent shell's terminal, e.g. to answer a prompt of the running command (end it with a "+
			"newline to submit a line); read what follows with shell_read.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
			prop(s, "text").MinLength = jsonschema.Ptr(1)
		}, shellWriteTarget, nil),
	tool[ShellReadArgs](ToolShellRead,
		"Return, as the call's output, what a persistent shell printed since the last shell_run or shell_read, optionally "+
			"waiting wait_ms for some; the result says whether a command is still running and, once it finished, its exit code.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
			prop(s, "wait_ms").Minimum = jsonschema.Ptr(0.0)
			prop(s, "wait_ms").Maximum = jsonschema.Ptr(60000.0)
		}, shellReadTarget, nil),
	tool[ShellInterruptArgs](ToolShellInterrupt,
		"Send Ctrl-C (SIGINT) to the foreground process group of a persistent shell, stopping the command it runs.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
		}, shellInterruptTarget, nil),
	tool[ShellKillArgs](ToolShellKill,
		"Kill a persistent shell and the processes it runs, and forget its name.",
		func(s *jsonschema.Schema) {
			prop(s, "name").Pattern = ShellNamePattern
		}, shellKillTarget, nil),
	tool[ApplyPatchArgs](ToolApplyPatch,
		"Apply a unified diff (git diff style; several files, new, deleted and renamed files allowed) to the workspace, "+
			"all or nothing: a patch that does not apply cleanly changes nothing and the error says where it failed. "+
			"Return the files touched. Needs git.",
		func(s *jsonschema.Schema) {
			prop(s, "patch").MinLength = jsonschema.Ptr(1)
		}, applyPatchTarget, textOf(applyPatchSummary)),
	tool[GlobArgs](ToolGlob,
		"List the files and directories matching a glob pattern ('**' matches any number of directories), sorted, at most 1000; "+
			".git directories are skipped unless the pattern names them.",
		func(s *jsonschema.Schema) {
			prop(s, "pattern").MinLength = jsonschema.Ptr(1)
		}, globTarget, textOf(globSummary)),
	tool[GrepArgs](ToolGrep,
		"Search the files under path for lines matching a regular expression and return each match's file, 1-based line "+
			"and text (long lines cut to 500 characters), at most max_matches (default 200); the result says when there were "+
			"more. .git, binary files and files over 1 MiB are skipped.",
		func(s *jsonschema.Schema) {
			prop(s, "pattern").MinLength = jsonschema.Ptr(1)
			prop(s, "max_matches").Minimum = jsonschema.Ptr(0.0)
		}, grepTarget, textOf(grepSummary)),
	tool[GitStatusArgs](ToolGitStatus,
		"Report the state of a clone under repos/<repo>: its branch (empty when HEAD is detached), HEAD commit, upstream "+
			"and how far ahead and behind it, whether the work tree is clean, and each changed, untracked or unmerged path "+
			"with git's index and work-tree status letters (at most 1000).",
		func(s *jsonschema.Schema) {
			prop(s, "repo").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, gitStatusTarget, textOf(gitStatusSummary)),
	tool[GitDiffArgs](ToolGitDiff,
		"Return the unified diff of a clone under repos/<repo>: unstaged changes (work tree against index), or staged "+
			"ones (index against HEAD) when staged is set, optionally limited to paths. Diffs over 256 KiB are cut and "+
			"marked truncated.",
		func(s *jsonschema.Schema) {
			prop(s, "repo").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, gitDiffTarget, textOf(gitDiffSummary)),
	tool[GitCheckoutArgs](ToolGitCheckout,
		"Check out a branch, tag or commit in a clone under repos/<repo> (a branch only on origin is checked out tracking "+
			"it), or with create make a new branch named ref at the current commit; return the branch and HEAD commit.",
		func(s *jsonschema.Schema) {
			prop(s, "repo").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
			prop(s, "ref").MinLength = jsonschema.Ptr(1)
		}, gitCheckoutTarget, textOf(gitCheckoutSummary)),
	tool[GitCommitArgs](ToolGitCommit,
		"Commit in a clone under repos/<repo>: stage every change (all) or the given paths first, then commit what is "+
			"staged with message; return the new commit's sha and branch. Author and committer are the session's "+
			"GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL when set, else Outpost Agent <agent@outpost.invalid>.",
		func(s *jsonschema.Schema) {
			prop(s, "repo").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
			prop(s, "message").MinLength = jsonschema.Ptr(1)
		}, gitCommitTarget, textOf(gitCommitSummary)),
	tool[GitPushArgs](ToolGitPush,
		"Push a branch of a clone under repos/<repo> (default the checked-out one) to the branch of the same name on a "+
			"remote (default origin), never forced; set_upstream makes it the branch's upstream. Https remotes "+
			"authenticate with the session's secret GIT_TOKEN_<HOST> (github.com is GIT_TOKEN_GITHUB_COM) or GIT_TOKEN.",
		func(s *jsonschema.Schema) {
			prop(s, "repo").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}, gitPushTarget, textOf(gitPushSummary)),
	serverTool(tool[NetworkAccessRequestArgs](ToolNetworkAccessRequest,
		"Ask a person for network access the session's policy does not give: domains are host names (api.example.com) "+
			"or wildcards (*.example.com), reason says why the task needs them. The call waits until a person grants or "+
			"denies the request, which may take a while; the result says whether it was granted, for this session or "+
			"for every session of the outpost, and a denial's reason. Ask only after a connection was refused by the "+
			"policy, and do not ask again for what was denied.",
		func(s *jsonschema.Schema) {
			d := prop(s, "domains")
			d.MinItems = jsonschema.Ptr(1)
			d.MaxItems = jsonschema.Ptr(MaxNetworkRequestDomains)
			d.Items.MinLength = jsonschema.Ptr(1)
			d.Items.MaxLength = jsonschema.Ptr(253)
			r := prop(s, "reason")
			r.MinLength = jsonschema.Ptr(1)
			r.MaxLength = jsonschema.Ptr(MaxNetworkRequestReason)
		}, networkRequestTarget, textOf(networkRequestSummary))),
}

// serverTool marks d as a tool the control plane answers itself.
func serverTool(d toolDef) toolDef {
	d.server = true
	return d
}

// prop returns the schema of s's property name, for refine functions. A
// missing property is a programming error (a field renamed in tools.go but
// not here), caught by the package's tests.
func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p := s.Properties[name]
	if p == nil {
		panic(fmt.Sprintf("api: tool schema has no property %q", name))
	}
	return p
}

// schemaOptions make slices plain arrays: the generator would allow null for
// a nil slice, which models need not be told about.
var schemaOptions = &jsonschema.ForOptions{
	TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[[]string](): {Type: "array", Items: &jsonschema.Schema{Type: "string"}},
		reflect.TypeFor[[]int]():    {Type: "array", Items: &jsonschema.Schema{Type: "integer"}},
	},
}

// toolIndex maps a tool's name to its position in toolTable.
var toolIndex = func() map[string]int {
	m := make(map[string]int, len(toolTable))
	for i, d := range toolTable {
		m[d.name] = i
	}
	return m
}()

// NewToolArgs returns a pointer to a zero argument value for tool, or false
// when no such tool exists.
func NewToolArgs(tool string) (any, bool) {
	i, ok := toolIndex[tool]
	if !ok {
		return nil, false
	}
	return toolTable[i].newArgs(), true
}

// IsServerTool reports whether the control plane answers calls of tool
// itself (network_access_request): they never reach a remote.
func IsServerTool(tool string) bool {
	i, ok := toolIndex[tool]
	return ok && toolTable[i].server
}

// RemoteToolNames lists the tools a remote runs: ToolNames without the
// server's own.
func RemoteToolNames() []string {
	var names []string
	for _, d := range toolTable {
		if !d.server {
			names = append(names, d.name)
		}
	}
	return names
}

// ToolNames lists every tool, in a stable order.
func ToolNames() []string {
	names := make([]string, len(toolTable))
	for i, d := range toolTable {
		names[i] = d.name
	}
	return names
}
