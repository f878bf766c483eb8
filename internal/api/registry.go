package api

// toolArgs maps every tool to a constructor of its argument type. It is the
// one list of tools the control plane validates script steps against.
var toolArgs = map[string]func() any{
	ToolExec:      func() any { return new(ExecArgs) },
	ToolReadFile:  func() any { return new(ReadFileArgs) },
	ToolWriteFile: func() any { return new(WriteFileArgs) },
	ToolEditFile:  func() any { return new(EditFileArgs) },
	ToolListDir:   func() any { return new(ListDirArgs) },
	ToolGitClone:  func() any { return new(GitCloneArgs) },
}

// NewToolArgs returns a pointer to a zero argument value for tool, or false
// when no such tool exists.
func NewToolArgs(tool string) (any, bool) {
	f, ok := toolArgs[tool]
	if !ok {
		return nil, false
	}
	return f(), true
}

// ToolNames lists every tool, in a stable order.
func ToolNames() []string {
	return []string{ToolExec, ToolReadFile, ToolWriteFile, ToolEditFile, ToolListDir, ToolGitClone}
}
