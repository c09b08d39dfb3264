// Command bundle type-checks the page's TypeScript (web/ui/src) with tsc
// and compiles it into one script, web/ui/dist/app.js, with esbuild's Go
// API. The bundle is the same bytes on every machine (no source maps, no
// paths, no timestamps), so that CI can check that the committed one is
// fresh. Run it with `go generate ./web/`.
//
// esbuild only strips types; the check is TypeScript's own compiler (tsc
// --noEmit), the version web/ui/package-lock.json pins, installed by npm ci
// into heapscope's cache folder on first use: Node and npm are needed where
// the bundle is built, never where heapscope runs. -tsc=false skips it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/evanw/esbuild/pkg/api"
)

func main() {
	out := flag.String("o", filepath.Join("ui", "dist", "app.js"), "the bundle to write")
	tsc := flag.Bool("tsc", true, "type-check the sources with tsc --noEmit first")
	only := flag.Bool("check", false, "only type-check: write no bundle")
	flag.Parse()
	// go generate runs in the package's directory: web/.
	ui, err := filepath.Abs("ui")
	if err == nil && (*tsc || *only) {
		err = typecheck(ui)
	}
	if err == nil && !*only {
		err = run(ui, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

// typecheck runs tsc --noEmit on ui's tsconfig.json, with the TypeScript
// that ui/package-lock.json pins, installed once into the cache.
func typecheck(ui string) error {
	lock, err := os.ReadFile(filepath.Join(ui, "package-lock.json"))
	if err != nil {
		return err
	}
	pkg, err := os.ReadFile(filepath.Join(ui, "package.json"))
	if err != nil {
		return err
	}
	dir := os.Getenv("HEAPSCOPE_TSC_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("tsc: no cache folder for TypeScript (set HEAPSCOPE_TSC_DIR): %w", err)
		}
		dir = filepath.Join(cache, "heapscope", "tsc")
	}
	tsc := filepath.Join(dir, "node_modules", "typescript", "lib", "tsc.js")
	if old, err := os.ReadFile(filepath.Join(dir, "package-lock.json")); err != nil || !bytes.Equal(old, lock) || !exists(tsc) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o600); err != nil {
			return err
		}
		npm := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
		npm.Dir = dir
		if b, err := npm.CombinedOutput(); err != nil {
			return fmt.Errorf("tsc: installing TypeScript with npm ci in %s: %w\n%s", dir, err, b)
		}
	}
	cmd := exec.Command("node", tsc, "--noEmit", "-p", filepath.Join(ui, "tsconfig.json"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("tsc --noEmit: %w\n%s", err, b)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func run(ui, out string) error {
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
