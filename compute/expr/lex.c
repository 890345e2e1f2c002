/* compute/expr/lex.c — the tokenizer of the expression language.
 *
 * One pass over the source: blanks (space, tab, CR, LF) are skipped; numbers
 * are decimal (digits, an optional fraction, an optional exponent; ".5" and
 * "5." are numbers, "1e" is an error); names are [A-Za-z_][A-Za-z0-9_]*, and
 * the names and/or/not are the logic keywords; everything else is an
 * operator of one or two characters (`**`, `//`, `<=`, `>=`, `==`, `!=`). Each token keeps its byte offset so
 * that the parser and the caller can say where a problem is. The token
 * array is bounded by the source length (at most EXPR_MAX_SRC + 1 tokens).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "compute/expr/expr_int.h"
#include "util/util.h"

static const char *const tok_text[] = {
    [TK_END] = "end of expression", [TK_NUM] = "number", [TK_NAME] = "name",
    [TK_PLUS] = "'+'", [TK_MINUS] = "'-'", [TK_STAR] = "'*'",
    [TK_SLASH] = "'/'", [TK_DSLASH] = "'//'", [TK_PERCENT] = "'%'", [TK_POW] = "'**'",
    [TK_LT] = "'<'", [TK_LE] = "'<='", [TK_GT] = "'>'", [TK_GE] = "'>='",
    [TK_EQ] = "'=='", [TK_NE] = "'!='", [TK_AND] = "'and'",
    [TK_OR] = "'or'", [TK_NOT] = "'not'", [TK_LPAREN] = "'('",
    [TK_RPAREN] = "')'", [TK_COMMA] = "','",
};

const char *expr_tok_text(expr_tok_kind k) {
  return (unsigned)k < sizeof tok_text / sizeof *tok_text ? tok_text[k] : "?";
}

static int is_name_start(int c) { return isalpha(c) || c == '_'; }
static int is_name_char(int c) { return isalnum(c) || c == '_'; }

/* A number starting at s[i]; sets *end past it. */
static int lex_number(const char *s, int i, int *end, double *val, terr *e) {
  int j = i, digits = 0;
  while (isdigit((unsigned char)s[j])) j++, digits++;
  if (s[j] == '.') {
    j++;
    while (isdigit((unsigned char)s[j])) j++, digits++;
  }
  if (!digits)
    return terr_set(e, T_EINVAL, "", i, "bad number at %d", i);
  if (s[j] == 'e' || s[j] == 'E') {
    int k = j + 1;
    if (s[k] == '+' || s[k] == '-') k++;
    if (!isdigit((unsigned char)s[k]))
      return terr_set(e, T_EINVAL, "", i, "bad number '%.*s' at %d", k - i,
                      s + i, i);
    while (isdigit((unsigned char)s[k])) k++;
    j = k;
  }
  if (is_name_char((unsigned char)s[j]) || s[j] == '.')
    return terr_set(e, T_EINVAL, "", i, "bad number '%.*s' at %d",
                    j - i + 1 > 40 ? 40 : j - i + 1, s + i, i);
  /* strtod reads in place and must stop where the scan above did. */
  char *stop = NULL;
  *val = strtod(s + i, &stop);
  if (stop != s + j)
    return terr_set(e, T_EINVAL, "", i, "bad number at %d", i);
  *end = j;
  return 0;
}

int expr_lex(const char *src, expr_tok **toks, int *ntok, terr *e) {
  *toks = NULL;
  *ntok = 0;
  size_t n = strlen(src);
  if (n > EXPR_MAX_SRC)
    return terr_set(e, T_EINVAL, "", EXPR_MAX_SRC,
                    "expression too long: %zu bytes (max %d) at %d", n,
                    EXPR_MAX_SRC, EXPR_MAX_SRC);
  expr_tok *t = calloc(n + 1, sizeof *t);
  if (!t) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  int k = 0, i = 0, rc = 0;
  while (src[i]) {
    unsigned char c = (unsigned char)src[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      i++;
      continue;
    }
    expr_tok *tk = &t[k];
    tk->pos = i;
    int len = 1;
    if (isdigit(c) || (c == '.' && isdigit((unsigned char)src[i + 1]))) {
      int end = i;
      if ((rc = lex_number(src, i, &end, &tk->num, e))) goto fail;
      tk->kind = TK_NUM;
      len = end - i;
    } else if (is_name_start(c)) {
      int j = i;
      while (is_name_char((unsigned char)src[j])) j++;
      len = j - i;
      if (len > EXPR_MAX_NAME) {
        rc = terr_set(e, T_EINVAL, "", i,
                      "name too long (max %d characters) at %d",
                      EXPR_MAX_NAME, i);
        goto fail;
      }
      tk->kind = TK_NAME;
      if (len == 3 && !memcmp(src + i, "and", 3)) tk->kind = TK_AND;
      else if (len == 2 && !memcmp(src + i, "or", 2)) tk->kind = TK_OR;
      else if (len == 3 && !memcmp(src + i, "not", 3)) tk->kind = TK_NOT;
    } else {
      char d = src[i + 1];
      switch (c) {
        case '+': tk->kind = TK_PLUS; break;
        case '-': tk->kind = TK_MINUS; break;
        case '*':
          if (d == '*') tk->kind = TK_POW, len = 2;
          else tk->kind = TK_STAR;
          break;
        case '/':
          if (d == '/') tk->kind = TK_DSLASH, len = 2;
          else tk->kind = TK_SLASH;
          break;
        case '%': tk->kind = TK_PERCENT; break;
        case '(': tk->kind = TK_LPAREN; break;
        case ')': tk->kind = TK_RPAREN; break;
        case ',': tk->kind = TK_COMMA; break;
        case '<':
          if (d == '=') tk->kind = TK_LE, len = 2;
          else tk->kind = TK_LT;
          break;
        case '>':
          if (d == '=') tk->kind = TK_GE, len = 2;
          else tk->kind = TK_GT;
          break;
        case '=':
          if (d != '=') goto bad;
          tk->kind = TK_EQ, len = 2;
          break;
        case '!':
          if (d != '=') goto bad;
          tk->kind = TK_NE, len = 2;
          break;
        default:
          goto bad;
      }
    }
    tk->len = len;
    i += len;
    k++;
    continue;
  bad:
    if (c >= 0x21 && c < 0x7f)
      rc = terr_set(e, T_EINVAL, "", i, "unexpected character '%c' at %d", c,
                    i);
    else
      rc = terr_set(e, T_EINVAL, "", i,
                    "unexpected character 0x%02x at %d", c, i);
    goto fail;
  }
  t[k].kind = TK_END;
  t[k].pos = i;
  t[k].len = 0;
  *toks = t;
  *ntok = k + 1;
  return 0;
fail:
  free(t);
  return rc;
}
