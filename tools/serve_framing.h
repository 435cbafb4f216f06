/* serve_framing.h: strict HTTP/1.1 message framing for `specula serve`
 * (RFC 9112 section 6): a request whose body length is ambiguous (two
 * Content-Length headers, Content-Length with Transfer-Encoding, several
 * Transfer-Encoding headers, a transfer coding other than exactly
 * "chunked", a Content-Length that is not a number) is refused with 400
 * and the connection closed, since the server and a proxy in front of it
 * could disagree on where the next request starts (request smuggling). */
#ifndef SP_SERVE_FRAMING_H
#define SP_SERVE_FRAMING_H

#include <microhttpd.h>

/* NULL when the request's framing headers are unambiguous, else what is
 * wrong (a static string). Call on the first access-handler call, before
 * any body is read. */
const char *serve_framing_error(struct MHD_Connection *c);

#endif
