/* SPDX-License-Identifier: MIT */
/* tokens: parsing the tokens file and checking bearer tokens (see tokens.h). */
#include "server/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct token_entry {
	struct token_identity who;
	char token[TOKEN_MAX_LEN + 1];
	size_t len;
};

struct tokens {
	struct token_entry *entries;
	size_t n;
};

static const char name_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "0123456789._-";

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

/* The next blank-separated word of *s (NUL-terminated in place), or NULL. */
static char *next_word(char **s)
{
	char *p = *s, *word;

	while (is_blank(*p))
		p++;
	if (!*p)
		return NULL;
	word = p;
	while (*p && !is_blank(*p))
		p++;
	if (*p)
		*p++ = '\0';
	*s = p;
	return word;
}

static bool is_token_text(const char *s)
{
	for (; *s; s++)
		if (*s < 0x21 || *s > 0x7e)
			return false;
	return true;
}

/* Same time for any contents of equal-length inputs; a length mismatch
 * still reads the whole stored token. */
static bool same_token(const struct token_entry *e, const char *presented, size_t len)
{
	unsigned char diff = (unsigned char)(e->len != len);

	for (size_t i = 0; i < e->len; i++)
		diff |= (unsigned char)(e->token[i] ^ (i < len ? presented[i] : 0));
	return diff == 0;
}

static int add_entry(struct tokens *t, const struct token_entry *e)
{
	struct token_entry *grown = realloc(t->entries, sizeof(*grown) * (t->n + 1));

	if (!grown)
		return -ENOMEM;
	t->entries = grown;
	t->entries[t->n++] = *e;
	return 0;
}

/* One non-comment line into t; the reason into err without the location. */
static int parse_line(struct tokens *t, char *line, struct errbuf *err)
{
	struct token_entry e = { 0 };
	char *name = next_word(&line);
	char *token = next_word(&line);
	char *flag = next_word(&line);
	size_t name_len, token_len;

	if (!token)
		return errbuf_set(err, -EINVAL, "", "expected 'NAME TOKEN [admin]'");
	if (next_word(&line))
		return errbuf_set(err, -EINVAL, "", "expected 'NAME TOKEN [admin]', got more words");
	if (flag && strcmp(flag, "admin") != 0)
		return errbuf_set(err, -EINVAL, "", "the third word may only be 'admin', got "
				  "'%.40s'", flag);
	name_len = strlen(name);
	if (name_len > TOKEN_NAME_MAX || *name == '-' || *name == '.' ||
	    strspn(name, name_chars) != name_len)
		return errbuf_set(err, -EINVAL, "", "NAME must be 1 to %d letters, digits, '.', '_' "
				  "or '-', not starting with '.' or '-'", TOKEN_NAME_MAX);
	token_len = strlen(token);
	/* The token itself is never quoted back: the message may reach a log. */
	if (token_len < TOKEN_MIN_LEN || token_len > TOKEN_MAX_LEN || !is_token_text(token))
		return errbuf_set(err, -EINVAL, "", "the token of %s must be %d to %d printable "
				  "ASCII characters (e.g. `openssl rand -hex 32`)", name,
				  TOKEN_MIN_LEN, TOKEN_MAX_LEN);
	for (size_t i = 0; i < t->n; i++)
		if (same_token(&t->entries[i], token, token_len))
			return errbuf_set(err, -EINVAL, "", "the token of %s is also %s's: each token "
					  "must name one client", name, t->entries[i].who.name);
	memcpy(e.who.name, name, name_len);
	e.who.admin = flag != NULL;
	memcpy(e.token, token, token_len);
	e.len = token_len;
	if (add_entry(t, &e) < 0)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	return 0;
}

int tokens_parse(FILE *fp, const char *path, struct tokens **ret, struct errbuf *err)
{
	struct tokens *t = calloc(1, sizeof(*t));
	struct errbuf inner = { 0 };
	char *buf = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned line = 0;
	bool at_line;
	int r = 0;

	if (!t)
		return errbuf_set(err, -ENOMEM, "tokens_file", "out of memory");
	while (r == 0 && (len = getline(&buf, &cap, fp)) >= 0) {
		char *s = buf;

		line++;
		if (strlen(buf) != (size_t)len) {
			r = errbuf_set(&inner, -EINVAL, "", "contains a NUL byte");
			break;
		}
		buf[strcspn(buf, "\n")] = '\0';
		while (is_blank(*s))
			s++;
		if (*s && *s != '#')
			r = parse_line(t, s, &inner);
	}
	at_line = r < 0;   /* a line's error, located; the ones below are the file's */
	/* The buffer held tokens: wipe it before it goes back to the heap. */
	if (buf)
		explicit_bzero(buf, cap);
	free(buf);
	if (r == 0 && ferror(fp))
		r = errbuf_set(&inner, -EIO, "", "read error");
	else if (r == 0 && t->n == 0)
		r = errbuf_set(&inner, -EINVAL, "", "has no tokens: TCP would admit nobody");
	if (r < 0) {
		tokens_free(t);
		if (at_line)
			return errbuf_set(err, r, "tokens_file", "%s:%u: %s", path, line,
					  inner.message);
		return errbuf_set(err, r, "tokens_file", "%s: %s", path, inner.message);
	}
	*ret = t;
	return 0;
}

int tokens_load(const char *path, struct tokens **ret, struct errbuf *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	FILE *fp;
	int r;

	if (fd < 0)
		return errbuf_set(err, -errno, "tokens_file", "%s: %s", path, strerror(errno));
	/* fstat of the open file: no window for a swap after the check. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return errbuf_set(err, -EINVAL, "tokens_file", "%s: not a regular file", path);
	}
	if (st.st_mode & 077) {
		close(fd);
		return errbuf_set(err, -EPERM, "tokens_file", "%s: mode %04o lets group or others "
				  "access the tokens: chmod 600 it", path,
				  (unsigned)(st.st_mode & 07777));
	}
	fp = fdopen(fd, "r");
	if (!fp) {
		r = -errno;
		close(fd);
		return errbuf_set(err, r, "tokens_file", "%s: %s", path, strerror(-r));
	}
	r = tokens_parse(fp, path, ret, err);
	fclose(fp);
	return r;
}

size_t tokens_count(const struct tokens *t)
{
	return t ? t->n : 0;
}

int tokens_check(const struct tokens *t, const char *presented, size_t len,
		 struct token_identity *ret)
{
	const struct token_entry *found = NULL;

	/* No early exit: the time does not depend on which entry matches. */
	for (size_t i = 0; t && i < t->n; i++) {
		bool same = same_token(&t->entries[i], presented, len);

		if (same && !found)
			found = &t->entries[i];
	}
	if (!found)
		return -EACCES;
	*ret = found->who;
	return 0;
}

void tokens_free(struct tokens *t)
{
	if (!t)
		return;
	if (t->entries)
		explicit_bzero(t->entries, sizeof(*t->entries) * t->n);
	free(t->entries);
	free(t);
}
