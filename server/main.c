/* main.c — placeholder until the daemon is wired (see api/ and server/). */
#include <stdio.h>
int main(void) {
  fprintf(stderr, "tesseld: not wired yet\n");
  return 1;
}
