/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* deadlock-rw.h: the deadlock program's read-write lock cases (deadlock-rw.c). */
#ifndef TEST_DEADLOCK_RW_H
#define TEST_DEADLOCK_RW_H

/* Adds the cases of deadlock-rw.c. */
void deadlock_rw_add_tests (void);

#endif /* TEST_DEADLOCK_RW_H */
