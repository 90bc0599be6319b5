/* comm/agree.c: tp_agree (comm.h). */
#include <stdio.h>
#include "runtime/comm/comm.h"
#include "util/errmsg.h"

int tp_agree(tp_comm *c, int rc, bool *everywhere, char *err, size_t errlen)
{
    int agreed = c->ops->agree ? c->ops->agree(c, rc, err, errlen) : rc != 0;
    *everywhere = agreed > 0 && (c->ops->agree || c->world == 1);
    if (*everywhere && c->world > 1) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err);
        tp_error(err, errlen, "rank %d: %s", agreed - 1, msg);
    }
    return agreed ? -1 : 0;
}
