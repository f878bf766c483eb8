package api

// Tool names. One vocabulary for script steps, model tool calls and MCP.
const (
	ToolExec      = "exec"
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
	ToolEditFile  = "edit_file"
	ToolListDir   = "list_dir"
	ToolGitClone  = "git_clone"
)

// ExecArgs runs a command. Exactly one of Command (run by `sh -c`) and Argv
// is set.
type ExecArgs struct {
	// Command is a shell command line, run by `sh -c`.
	Command string `json:"command,omitempty"`
	// Argv is a program and its arguments, run without a shell.
	Argv []string `json:"argv,omitempty"`
	// Cwd is the working directory, relative to the workspace unless absolute.
	Cwd string `json:"cwd,omitempty"`
	// Env adds to the session's environment.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutS kills the command after this many seconds; 0 means 600.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// Stdin is written to the command's standard input.
	Stdin string `json:"stdin,omitempty"`
}

// ExecResult is what exec returns.
type ExecResult struct {
	ExitCode    int   `json:"exit_code"`
	TimedOut    bool  `json:"timed_out,omitempty"`
	DurationMS  int64 `json:"duration_ms"`
	OutputBytes int64 `json:"output_bytes"`
	// Tail is the last few KiB of combined output, for readers of the result alone.
	Tail string `json:"tail,omitempty"`
}

// ReadFileArgs reads a text file.
type ReadFileArgs struct {
	// Path is relative to the workspace unless absolute.
	Path string `json:"path"`
}

// ReadFileResult is what read_file returns.
type ReadFileResult struct {
	Content string `json:"content"`
	Size    int64  `json:"size"`
}

// WriteFileArgs writes a file, creating parent directories.
type WriteFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// WriteFileResult is what write_file returns.
type WriteFileResult struct {
	Bytes int64 `json:"bytes"`
}

// EditFileArgs replaces Old with New in a file; Old must occur exactly once.
type EditFileArgs struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// EditFileResult is what edit_file returns.
type EditFileResult struct {
	// Line is the 1-based line where the replacement starts.
	Line int `json:"line"`
}

// ListDirArgs lists a directory.
type ListDirArgs struct {
	Path string `json:"path"`
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // "file", "dir", "symlink" or "other"
	Size int64  `json:"size"`
}

// ListDirResult is what list_dir returns.
type ListDirResult struct {
	Entries []DirEntry `json:"entries"`
}

// GitCloneArgs clones a repository into repos/<name>, or fetches it when it
// is already there.
type GitCloneArgs struct {
	URL  string `json:"url"`
	Name string `json:"name"`
	Ref  string `json:"ref,omitempty"`
}

// GitCloneResult is what git_clone returns.
type GitCloneResult struct {
	Path   string `json:"path"`
	Head   string `json:"head"`
	Reused bool   `json:"reused"`
}
