// Command bundle compiles the page's TypeScript (web/ui/src) into one
// script, web/ui/dist/app.js, with esbuild's Go API: no Node and no npm are
// needed to build it, and the output is the same bytes on every machine
// (no source maps, no paths, no timestamps), so that CI can check that the
// committed bundle is fresh. Run it with `go generate ./web/`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/evanw/esbuild/pkg/api"
)

func main() {
	out := flag.String("o", filepath.Join("ui", "dist", "app.js"), "the bundle to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	// go generate runs in the package's directory: web/.
	ui, err := filepath.Abs("ui")
	if err != nil {
		return err
	}
	res := api.Build(api.BuildOptions{
		AbsWorkingDir:     ui,
		EntryPoints:       []string{"src/main.ts"},
		Bundle:            true,
		Format:            api.FormatIIFE,
		Target:            api.ES2020,
		MinifySyntax:      true,
		MinifyWhitespace:  true,
		MinifyIdentifiers: false,
		LegalComments:     api.LegalCommentsNone,
		Charset:           api.CharsetUTF8,
		Write:             false,
		LogLevel:          api.LogLevelWarning,
	})
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d errors (printed above)", len(res.Errors))
	}
	if len(res.OutputFiles) != 1 {
		return fmt.Errorf("want one output file, got %d", len(res.OutputFiles))
	}
	return os.WriteFile(out, res.OutputFiles[0].Contents, 0o644)
}
