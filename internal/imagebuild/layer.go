package imagebuild

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
)

// Epoch is the time of every file in a layer and of the image config, so that the same
// inputs give the same layers, config and digest.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer: a directory, a symlink, or a regular file whose content
// is a host file or bytes given here.
type File struct {
	// Path is the entry's absolute path in the image.
	Path string
	// Mode holds the type bits (fs.ModeDir, fs.ModeSymlink; none for a regular file) and
	// the permissions, sticky bit included.
	Mode fs.FileMode
	// UID and GID own the entry.
	UID, GID int
	// Source is the host file a regular file's content is read from; Data is the content
	// when Source is empty.
	Source string
	Data   []byte
	// Link is a symlink's target.
	Link string
}

// Dir is a directory owned by root.
func Dir(p string, perm fs.FileMode) File {
	return File{Path: p, Mode: fs.ModeDir | perm}
}

// Copied is a regular file owned by root with the content of the host file source.
func Copied(p, source string, perm fs.FileMode) File {
	return File{Path: p, Mode: perm, Source: source}
}

// Content is a regular file owned by root, mode 0644, with the content data.
func Content(p, data string) File {
	return File{Path: p, Mode: 0o644, Data: []byte(data)}
}

// Tree returns the entries that copy the host directory src, with what is under it, to
// dst in the image, owned by root. Symlinks are kept as they are when they point inside
// the tree; one that points outside it (the image would not have its target) or a file
// that is neither a directory, a regular file nor a symlink is an error.
func Tree(src, dst string) ([]File, error) {
	var files []File
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
			files = append(files, Dir(target, perm))
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			resolved := filepath.Join(filepath.Dir(p), link)
			if filepath.IsAbs(link) || (resolved != src && !strings.HasPrefix(resolved, src+string(filepath.Separator))) {
				return fmt.Errorf("%s: symlink to %s, outside %s", p, link, src)
			}
			files = append(files, File{Path: target, Mode: fs.ModeSymlink | 0o777, Link: filepath.ToSlash(link)})
		case d.Type().IsRegular():
			files = append(files, Copied(target, p, perm))
		default:
			return fmt.Errorf("%s: not a directory, regular file or symlink", p)
		}
		return nil
	})
	return files, err
}

// Layer is one layer of an image: its files, and what the image's history says of it.
type Layer struct {
	Comment string
	Files   []File
}

// BinaryLayer is a layer of one executable, the host file bin at the image path at.
func BinaryLayer(bin, at string) Layer {
	return Layer{Comment: at, Files: []File{Copied(at, bin, 0o755)}}
}

// BaseLayer is what distroless static:nonroot carries that a program may need: users
// and groups (root, nobody and nonroot), name service order, the CA bundle (the host
// file caBundle), /tmp and the home folders.
func BaseLayer(caBundle string) (Layer, error) {
	if _, err := os.Stat(caBundle); err != nil {
		return Layer{}, fmt.Errorf("CA bundle: %w", err)
	}
	return Layer{Comment: "base: users, CA bundle, /tmp, /home/nonroot", Files: []File{
		Content("/etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		Content("/etc/group", "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"),
		Content("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
		Copied("/etc/ssl/certs/ca-certificates.crt", caBundle, 0o644),
		Dir("/tmp", fs.ModeSticky|0o777),
		Dir("/root", 0o700),
		Dir("/home", 0o755),
		{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
	}}, nil
}

// writeLayer writes files to w as an uncompressed tar in path order, with a directory
// entry for every parent a file needs that files do not name (root's, mode 0755). Every
// entry carries Epoch as its time and numeric owners only, so that the same files give
// the same bytes.
func writeLayer(w io.Writer, files []File) error {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("%q: not a clean absolute path below /", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return fmt.Errorf("%s: named twice", f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for parent := path.Dir(f.Path); parent != "/"; parent = path.Dir(parent) {
			if have, ok := byPath[parent]; ok {
				if !have.Mode.IsDir() {
					return fmt.Errorf("%s: a parent of %s but not a directory", parent, f.Path)
				}
				continue
			}
			byPath[parent] = Dir(parent, 0o755)
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
func writeEntry(tw *tar.Writer, f File) error {
	mode := int64(f.Mode.Perm())
	if f.Mode&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if f.Mode&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if f.Mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    mode,
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: Epoch,
	}
	switch {
	case f.Mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case f.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.Link
		return tw.WriteHeader(hdr)
	case f.Source == "":
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(f.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(f.Data)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", f.Source)
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
