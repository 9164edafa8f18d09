package cache

import (
	"errors"
	"fmt"

	"github.com/stampede-go/stampede/cache/internal/envelope"
)

// The validation of an entry's tags and of an invalidation's tags:
// ErrInvalidTag.

// ErrInvalidTag means a tag is empty, longer than 128 bytes, holds a byte
// outside the namespace alphabet (ASCII letters, digits, '_', '-', '.', '/')
// and ':', or that more than 32 tags were given to one entry.
var ErrInvalidTag = errors.New("cache: invalid tag")

const (
	// maxTags bounds the tags of one entry (its envelope's stamp).
	maxTags = envelope.MaxTags
	// maxTagBytes bounds one tag.
	maxTagBytes = envelope.MaxTagBytes
)

// checkTag validates one tag.
func checkTag(t string) error {
	if t == "" {
		return fmt.Errorf("%w: empty", ErrInvalidTag)
	}
	if len(t) > maxTagBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidTag, len(t), maxTagBytes)
	}
	for i := 0; i < len(t); i++ {
		if b := t[i]; !envelope.TagByte(b) {
			return fmt.Errorf("%w: %q: byte %q at %d is not a letter, a digit, a colon or one of _ - . /", ErrInvalidTag, t, b, i)
		}
	}
	return nil
}

// checkTags validates tags for one entry.
func checkTags(tags []string) error {
	if len(tags) > maxTags {
		return fmt.Errorf("%w: %d tags, limit %d", ErrInvalidTag, len(tags), maxTags)
	}
	return checkEach(tags)
}

// checkEach validates each of tags: an invalidation takes any number.
func checkEach(tags []string) error {
	for _, t := range tags {
		if err := checkTag(t); err != nil {
			return err
		}
	}
	return nil
}
