from django.db import models


class Order(models.Model):
    customer = models.CharField(max_length=100)
