/* A small Linux CLI tool, as our users ship next to their models: a key-value store
 * that answers on stdin (an interactive mode) and through arguments.
 *   kvstore --version            -> kvstore 1.2.0
 *   kvstore get FILE KEY         -> the value, exit 0; exit 1 when the key is missing
 *   kvstore (no args)            -> "kv> " prompt; set K V / get K / count / quit */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 64

static char keys[MAX_KEYS][32], values[MAX_KEYS][64];
static int count;

static const char *lookup(const char *key) {
  for (int i = 0; i < count; ++i)
    if (strcmp(keys[i], key) == 0) return values[i];
  return NULL;
}

static int get_from_file(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "kvstore: cannot open %s\n", path);
    return 2;
  }
  char k[32], v[64];
  while (fscanf(f, "%31s %63s", k, v) == 2) {
    if (strcmp(k, key) == 0) {
      printf("%s\n", v);
      fclose(f);
      return 0;
    }
  }
  fclose(f);
  fprintf(stderr, "kvstore: no key %s\n", key);
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("kvstore 1.2.0\n");
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "get") == 0) return get_from_file(argv[2], argv[3]);
  setvbuf(stdout, NULL, _IONBF, 0); /* a prompt must reach a pipe at once */
  char line[128], k[32], v[64];
  for (;;) {
    printf("kv> ");
    if (!fgets(line, sizeof line, stdin)) return 0;
    if (sscanf(line, "set %31s %63s", k, v) == 2) {
      if (count < MAX_KEYS) {
        strcpy(keys[count], k);
        strcpy(values[count++], v);
      }
      printf("ok\n");
    } else if (sscanf(line, "get %31s", k) == 1) {
      const char *found = lookup(k);
      printf("%s\n", found ? found : "(none)");
    } else if (strncmp(line, "count", 5) == 0) {
      printf("%d keys\n", count);
    } else if (strncmp(line, "quit", 4) == 0) {
      return 0;
    } else {
      printf("? %s", line);
    }
  }
}
