package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the time of every file in a layer and of the image config, so that the same
// inputs give the same layers, config and digest.
var epoch = time.Unix(0, 0).UTC()

// file is one entry of a layer: a directory, a symlink, or a regular file whose content
// is a host file or bytes given here.
type file struct {
	// path is the entry's absolute path in the image.
	path string
	// mode holds the type bits (fs.ModeDir, fs.ModeSymlink; none for a regular file) and
	// the permissions, sticky bit included.
	mode fs.FileMode
	// uid and gid own the entry.
	uid, gid int
	// source is the host file a regular file's content is read from; data is the content
	// when source is empty.
	source string
	data   []byte
	// link is a symlink's target.
	link string
}

// dir is a directory owned by root.
func dir(p string, perm fs.FileMode) file {
	return file{path: p, mode: fs.ModeDir | perm}
}

// copied is a regular file owned by root with the content of the host file source.
func copied(p, source string, perm fs.FileMode) file {
	return file{path: p, mode: perm, source: source}
}

// content is a regular file owned by root, mode 0644, with the content data.
func content(p, data string) file {
	return file{path: p, mode: 0o644, data: []byte(data)}
}

// tree returns the entries that copy the host directory src, with what is under it, to
// dst in the image, owned by root. Symlinks are kept as they are when they point inside
// the tree; one that points outside it (the image would not have its target) or a file
// that is neither a directory, a regular file nor a symlink is an error.
func tree(src, dst string) ([]file, error) {
	var files []file
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		perm := info.Mode().Perm()
		switch {
		case d.IsDir():
			files = append(files, dir(target, perm))
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			resolved := filepath.Join(filepath.Dir(p), link)
			if filepath.IsAbs(link) || (resolved != src && !strings.HasPrefix(resolved, src+string(filepath.Separator))) {
				return fmt.Errorf("%s: symlink to %s, outside %s", p, link, src)
			}
			files = append(files, file{path: target, mode: fs.ModeSymlink | 0o777, link: filepath.ToSlash(link)})
		case d.Type().IsRegular():
			files = append(files, copied(target, p, perm))
		default:
			return fmt.Errorf("%s: not a directory, regular file or symlink", p)
		}
		return nil
	})
	return files, err
}

// writeLayer writes files to w as an uncompressed tar in path order, with a directory
// entry for every parent a file needs that files do not name (root's, mode 0755). Every
// entry carries epoch as its time and numeric owners only, so that the same files give
// the same bytes.
func writeLayer(w io.Writer, files []file) error {
	byPath := map[string]file{}
	for _, f := range files {
		if !path.IsAbs(f.path) || path.Clean(f.path) != f.path || f.path == "/" {
			return fmt.Errorf("%q: not a clean absolute path below /", f.path)
		}
		if _, dup := byPath[f.path]; dup {
			return fmt.Errorf("%s: named twice", f.path)
		}
		byPath[f.path] = f
	}
	for _, f := range files {
		for parent := path.Dir(f.path); parent != "/"; parent = path.Dir(parent) {
			if have, ok := byPath[parent]; ok {
				if !have.mode.IsDir() {
					return fmt.Errorf("%s: a parent of %s but not a directory", parent, f.path)
				}
				continue
			}
			byPath[parent] = dir(parent, 0o755)
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	tw := tar.NewWriter(w)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return tw.Close()
}

// writeEntry writes one entry to tw.
func writeEntry(tw *tar.Writer, f file) error {
	mode := int64(f.mode.Perm())
	if f.mode&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if f.mode&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if f.mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(f.path, "/"),
		Mode:    mode,
		Uid:     f.uid,
		Gid:     f.gid,
		ModTime: epoch,
	}
	switch {
	case f.mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case f.mode&fs.ModeSymlink != 0:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.link
		return tw.WriteHeader(hdr)
	case f.source == "":
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(f.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(f.data)
		return err
	}
	src, err := os.Open(f.source)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", f.source)
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that shrinks while it is copied fails here; one that grows is cut at the
	// size the header promised.
	_, err = io.CopyN(tw, src, info.Size())
	return err
}

// layer is one layer of an image: its files, and what the image's history says of it.
type layer struct {
	comment string
	files   []file
}

// config is what an image's config says of the container it runs.
type config struct {
	// user is "uid:gid" (numeric, so that runAsNonRoot can judge it without
	// /etc/passwd), or empty for root.
	user       string
	entrypoint []string
	cmd        []string
	env        []string
	labels     map[string]string
}

// buildImage assembles a linux/amd64 image of layers, in order, on no base, with cfg
// as its container config. Each layer is written, uncompressed, into a file in tmp,
// which must outlive the image: the image reads it until it is written out.
func buildImage(tmp string, layers []layer, cfg config) (v1.Image, error) {
	addenda := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		f, err := os.CreateTemp(tmp, "layer-*.tar")
		if err != nil {
			return nil, err
		}
		err = writeLayer(f, l.files)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", l.comment, err)
		}
		// Compressed once, for the digest, and kept for the tarball.
		lay, err := tarball.LayerFromFile(f.Name(), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", l.comment, err)
		}
		addenda = append(addenda, mutate.Addendum{
			Layer:   lay,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/node-images", Comment: l.comment},
		})
	}
	img, err := mutate.Append(empty.Image, addenda...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = "amd64"
	cf.OS = "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       cfg.user,
		Entrypoint: cfg.entrypoint,
		Cmd:        cfg.cmd,
		Env:        cfg.env,
		Labels:     cfg.labels,
	}
	return mutate.ConfigFile(img, cf)
}
