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

// ExecArgs runs a command. Exactly one of Command (run by a shell, see Shell) and Argv
// is set.
type ExecArgs struct {
	// Command is a shell command line, run by Shell.
	Command string `json:"command,omitempty" jsonschema:"Shell command line, run by the shell (see shell) in the working directory. Set exactly one of command and argv."`
	// Shell chooses the shell that runs Command; empty means the
	// machine's default (ShellDefault).
	Shell string `json:"shell,omitempty" jsonschema:"Shell that runs command: sh, bash, zsh, powershell, pwsh or cmd. Default: sh -c on Linux, the user's login shell ($SHELL, else /bin/zsh) on macOS, PowerShell on Windows when a working one is installed, else cmd.exe /c."`
	// Argv is a program and its arguments, run without a shell.
	Argv []string `json:"argv,omitempty" jsonschema:"Program and its arguments, run without a shell; argv[0] must not be empty. Set exactly one of command and argv."`
	// Cwd is the working directory, relative to the workspace unless absolute.
	Cwd string `json:"cwd,omitempty" jsonschema:"Working directory, relative to the workspace unless absolute; default the workspace."`
	// Env adds to the session's environment.
	Env map[string]string `json:"env,omitempty" jsonschema:"Environment variables added to the session's environment for this command."`
	// TimeoutS kills the command after this many seconds; 0 means 600.
	TimeoutS int64 `json:"timeout_s,omitempty" jsonschema:"Seconds after which the command and its children are killed; 0 or absent means 600."`
	// Stdin is written to the command's standard input.
	Stdin string `json:"stdin,omitempty" jsonschema:"Text written to the command's standard input."`
}

// Shells ExecArgs.Shell may name.
const (
	ShellDefault    = ""
	ShellSh         = "sh"
	ShellBash       = "bash"
	ShellZsh        = "zsh"
	ShellPowerShell = "powershell"
	ShellPwsh       = "pwsh"
	ShellCmd        = "cmd"
)

// ExecResult is what exec returns.
type ExecResult struct {
	// ExitCode is the command's exit status; -1 when it did not exit by
	// itself (a signal, or TimeoutS, killed it).
	ExitCode int `json:"exit_code"`
	// TimedOut is set when TimeoutS killed it.
	TimedOut bool `json:"timed_out,omitempty"`
	// DurationMS is how long it ran, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// OutputBytes counts its stdout and stderr, streamed as the call's
	// output.
	OutputBytes int64 `json:"output_bytes"`
	// Tail is the last few KiB of combined output, for readers of the result alone.
	Tail string `json:"tail,omitempty"`
}

// ReadFileArgs reads a text file.
type ReadFileArgs struct {
	// Path is relative to the workspace unless absolute.
	Path string `json:"path" jsonschema:"File to read, relative to the workspace unless absolute."`
	// StartLine is the first line returned, 1-based; 0 means 1.
	StartLine int `json:"start_line,omitempty" jsonschema:"First line to return, 1-based; 0 or absent means the first line."`
	// EndLine is the last line returned, inclusive; 0 means the last.
	EndLine int `json:"end_line,omitempty" jsonschema:"Last line to return, 1-based and inclusive; 0 or absent means the last line."`
}

// ReadFileResult is what read_file returns.
type ReadFileResult struct {
	// Content is the text read (the asked lines, when a range was).
	Content string `json:"content"`
	// Size is len(Content) in bytes.
	Size int64 `json:"size"`
	// TotalLines is the file's line count, set when a line range was asked for.
	TotalLines int `json:"total_lines,omitempty"`
}

// WriteFileArgs writes a file, creating parent directories.
type WriteFileArgs struct {
	// Path is relative to the workspace unless absolute.
	Path string `json:"path" jsonschema:"File to write, relative to the workspace unless absolute; parent directories are created."`
	// Content replaces the file's content.
	Content string `json:"content" jsonschema:"The file's whole new content; an empty string leaves an empty file."`
}

// WriteFileResult is what write_file returns.
type WriteFileResult struct {
	// Bytes is the size written.
	Bytes int64 `json:"bytes"`
}

// EditFileArgs replaces Old with New in a file; Old must occur exactly once.
type EditFileArgs struct {
	// Path is relative to the workspace unless absolute.
	Path string `json:"path" jsonschema:"File to edit, relative to the workspace unless absolute."`
	// Old is the text to replace; it must occur exactly once.
	Old string `json:"old" jsonschema:"Text to replace, matched exactly (whitespace included); it must occur exactly once in the file and must not be empty."`
	// New replaces Old.
	New string `json:"new" jsonschema:"Replacement text; an empty string deletes old."`
}

// EditFileResult is what edit_file returns.
type EditFileResult struct {
	// Line is the 1-based line where the replacement starts.
	Line int `json:"line"`
	// Diff shows the change as a unified diff with three lines of context
	// (cut when long), for transcripts and people.
	Diff string `json:"diff,omitempty"`
}

// ListDirArgs lists a directory.
type ListDirArgs struct {
	// Path is relative to the workspace unless absolute; empty means the
	// workspace itself.
	Path string `json:"path,omitempty" jsonschema:"Directory to list, relative to the workspace unless absolute; empty or absent lists the workspace."`
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	// Name is the entry's base name.
	Name string `json:"name"`
	Type string `json:"type"` // "file", "dir", "symlink" or "other"
	// Size is in bytes.
	Size int64 `json:"size"`
}

// ListDirResult is what list_dir returns.
type ListDirResult struct {
	Entries []DirEntry `json:"entries"`
}

// GitCloneArgs clones a repository into repos/<name>, or fetches it when it
// is already there.
type GitCloneArgs struct {
	// URL is the repository to clone.
	URL string `json:"url" jsonschema:"Repository URL or path to clone from; must not start with '-'."`
	// Name is the directory under repos/ in the workspace.
	Name string `json:"name" jsonschema:"Directory name under repos/ in the workspace: a letter or digit, then letters, digits, '.', '_' or '-'."`
	// Ref is a branch, tag or commit to check out; empty means the default
	// branch on a new clone and the current checkout on a reused one.
	Ref string `json:"ref,omitempty" jsonschema:"Branch, tag or commit to check out; absent means the remote's default branch on a new clone, and the current checkout on a reused one."`
}

// GitCloneResult is what git_clone returns.
type GitCloneResult struct {
	// Path is the clone's absolute path on the machine, the workspace's
	// repos/<name>.
	Path string `json:"path"`
	// Head is the commit checked out.
	Head string `json:"head"`
	// Reused is set when the clone was there already and was fetched.
	Reused bool `json:"reused"`
	// Mirror is the worker's shared mirror the clone took its objects from.
	Mirror string `json:"mirror,omitempty"`
}
